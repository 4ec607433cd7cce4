package codemode_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/spine-run/spine/codemode"
	"github.com/spine-run/spine/internal/spinetest"
)

func runImages(t *testing.T, opts *codemode.Options, source string) *codemode.Result {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"source": spinetest.PNGSource + source})
	res, err := codemode.New(runner, opts).Run(t.Context(), args)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestImages: the images a program writes (known by their bytes, not their
// names), displays or ends with reach the Result in a notebook's order, with
// their data; the text lists them.
func TestImages(t *testing.T) {
	res := runImages(t, nil, `
open("chart.png", "wb").write(png(4, 3))
open("photo.dat", "wb").write(png(2, 2, (0, 0, 255)))  # a PNG by its bytes
open("fake.png", "w").write("not a picture")
open("notes.txt", "w").write("hello")
display({"image/png": png(1, 1), "text/plain": "a dot"}, raw=True)
display("just text")
class Chart:
    def _repr_png_(self):
        return png(5, 6)
    def __repr__(self):
        return "<Chart>"
Chart()`)
	if res.IsError {
		t.Fatal(res.Text())
	}
	type got struct {
		label, mime string
		w, h        int
	}
	want := []got{{"display 1", "image/png", 1, 1}, {"the value", "image/png", 5, 6}, {"chart.png", "image/png", 4, 3}, {"photo.dat", "image/png", 2, 2}}
	if len(res.Images) != len(want) {
		t.Fatalf("%d images: %s", len(res.Images), res.Text())
	}
	for i, im := range res.Images {
		if g := (got{im.Label(), im.MIMEType, im.Width, im.Height}); g != want[i] || im.Bytes != len(im.Data) || im.Bytes == 0 {
			t.Errorf("image %d: %+v, want %+v", i, g, want[i])
		}
	}
	for _, f := range res.Output.Files {
		if f.Name == "chart.png" && !bytes.Equal(f.Data, res.Images[2].Data) {
			t.Error("chart.png's data differs from the file's")
		}
	}
	if !strings.HasPrefix(res.Images[0].DataURL(), "data:image/png;base64,iVBORw0KGgo") ||
		base64.StdEncoding.EncodeToString(res.Images[1].Data) != res.Images[1].Base64() {
		t.Errorf("data URL %.40s", res.Images[0].DataURL())
	}
	text := res.Text()
	if !strings.Contains(text, `"display":"<Chart>"`) || !strings.Contains(text, `"images":[{"source":"display","index":1,"mime_type":"image/png","width":1,"height":1,"bytes":`) ||
		!strings.Contains(text, `{"source":"file","name":"photo.dat","mime_type":"image/png","width":2,"height":2,"bytes":`) ||
		strings.Contains(text, "images_left_out") || strings.Contains(text, "iVBOR") {
		t.Errorf("text %s", text)
	}

	// A failed run gives no images; its files are listed.
	res = runImages(t, nil, `open("chart.png", "wb").write(png(4, 3)); 1/0`)
	if !res.IsError || res.Images != nil {
		t.Errorf("a failed run: %v %+v", res.IsError, res.Images)
	}
}

// TestImagesLeftOut: the caps on each image and on an answer's images, a
// damaged image and one too large in pixels are left out, and the text says
// which and why; a negative MaxImageBytes gives none and says nothing.
func TestImagesLeftOut(t *testing.T) {
	const source = `
open("a_big.png", "wb").write(png(120, 120, seed=1))    # noise: over 40 KiB
open("b_mid.png", "wb").write(png(70, 70, seed=2))      # noise: about 15 KiB
open("c_mid.png", "wb").write(png(70, 70, seed=3))
open("d_cut.png", "wb").write(png(8, 8)[:-6])
open("e_wide.png", "wb").write(png(9000, 1))
display({"image/png": b"plain bytes"}, raw=True)
display({"image/png": png(3, 3)}, raw=True)
`
	res := runImages(t, &codemode.Options{MaxImageBytes: 40 << 10, MaxAnswerImageBytes: 20 << 10}, source)
	if res.IsError {
		t.Fatal(res.Text())
	}
	var labels []string
	for _, im := range res.Images {
		labels = append(labels, im.Label())
	}
	if strings.Join(labels, " ") != "display 2 b_mid.png" {
		t.Errorf("images %v; %s", labels, res.ImagesLeftOut)
	}
	want := "5 images left out: not a PNG, JPEG, GIF or WebP image (display 1); over the 40 KiB limit per image (a_big.png); " +
		"over the 20 KiB limit per answer (c_mid.png); damaged or cut short (d_cut.png); over 8000 pixels on a side (e_wide.png)"
	if res.ImagesLeftOut != want || !strings.Contains(res.Text(), `"images_left_out":"`+want+`"`) {
		t.Errorf("left out:\n%s\nwant\n%s", res.ImagesLeftOut, want)
	}

	none := &codemode.Options{MaxImageBytes: -1}
	res = runImages(t, none, source)
	if res.IsError || res.Images != nil || res.ImagesLeftOut != "" || len(res.Files) != 5 {
		t.Errorf("no images: %s", res.Text())
	}
	if d := codemode.Description(manifest, none); strings.Contains(d, "shown to you as images") {
		t.Error("the description speaks of images a Tool without them does not give")
	}
	if d := codemode.Description(manifest, nil); !strings.Contains(d, "shown to you as images after the result: at most 8 per call, 1 MiB each and 4 MiB in all.") {
		t.Errorf("the description:\n%s", d)
	}
}

// TestImagesCount: an answer gives at most Options.MaxImages images (8 by
// default), however small, since a model API refuses a request with too
// many; the text names the first of those left out and counts the rest. An
// animated image (here an APNG) is left out as such.
func TestImagesCount(t *testing.T) {
	const source = `
import struct, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
still = png(2, 2)
open("anim.png", "wb").write(still[:33] + chunk(b"acTL", struct.pack(">II", 2, 0)) + still[33:])  # after IHDR
display({"image/png": png(3, 3)}, raw=True)
for i in range(30):
    open(f"p{i:02}.png", "wb").write(png(1, 1))
`
	res := runImages(t, nil, source)
	if res.IsError {
		t.Fatal(res.Text())
	}
	var labels []string
	for _, im := range res.Images {
		labels = append(labels, im.Label())
	}
	if got := strings.Join(labels, " "); got != "display 1 p00.png p01.png p02.png p03.png p04.png p05.png p06.png" {
		t.Errorf("images %s", got)
	}
	want := "24 images left out: animated (anim.png); over the limit of 8 images per answer " +
		"(p07.png, p08.png, p09.png, p10.png, p11.png, p12.png, p13.png, p14.png, p15.png, p16.png and 13 more)"
	if res.ImagesLeftOut != want || len(res.Files) != 31 {
		t.Errorf("left out:\n%s\nwant\n%s", res.ImagesLeftOut, want)
	}

	res = runImages(t, &codemode.Options{MaxImages: 2}, source)
	if len(res.Images) != 2 || !strings.HasPrefix(res.ImagesLeftOut, "30 images left out: animated (anim.png); over the limit of 2 images per answer (p01.png, ") {
		t.Errorf("MaxImages 2: %d images; %s", len(res.Images), res.ImagesLeftOut)
	}
	if d := codemode.Description(manifest, &codemode.Options{MaxImages: 2}); !strings.Contains(d, "(not animated)") ||
		!strings.Contains(d, "shown to you as images after the result: at most 2 per call, 1 MiB each and 4 MiB in all.") {
		t.Errorf("the description:\n%s", d)
	}
}
