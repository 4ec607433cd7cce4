package codemode

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"image/jpeg"
	"image/png"
	"math/rand"
	"testing"
)

// webpHeader is the start of a WebP whose first chunk is kind, with head as
// its first bytes, padded to a whole RIFF of n bytes.
func webpHeader(kind string, head []byte, n int) []byte {
	b := append([]byte("RIFF\x00\x00\x00\x00WEBP"+kind+"\x00\x00\x00\x00"), head...)
	b = append(b, make([]byte, n-len(b))...)
	binary.LittleEndian.PutUint32(b[4:], uint32(n-8))
	return b
}

// pngWithChunk is p with a chunk of kind and data after its IHDR.
func pngWithChunk(p []byte, kind string, data []byte) []byte {
	c := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	c = append(append(c, kind...), data...)
	c = binary.BigEndian.AppendUint32(c, crc32.ChecksumIEEE(c[4:]))
	return append(append(bytes.Clone(p[:33]), c...), p[33:]...)
}

// TestCheckImage: each format the APIs take is known by its bytes, with its
// size in pixels; one cut short, damaged, animated or too large is refused
// with why.
func TestCheckImage(t *testing.T) {
	img := image.NewRGBA(image.Rect(0, 0, 7, 5))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	var pngData, jpegData, gifData bytes.Buffer
	png.Encode(&pngData, img)
	jpeg.Encode(&jpegData, img, nil)
	gif.Encode(&gifData, img, nil)
	badCRC := bytes.Clone(pngData.Bytes())
	badCRC[len(badCRC)-20] ^= 1                              // inside IDAT
	vp8l := webpHeader("VP8L", []byte{0x2f, 6, 0, 1, 0}, 40) // 7 x 5: width-1 = 6, height-1 = 4 at bit 14
	vp8x := webpHeader("VP8X", []byte{0, 0, 0, 0, 6, 0, 0, 4, 0, 0}, 40)
	vp8 := webpHeader("VP8 ", []byte{0, 0, 0, 0x9d, 0x01, 0x2a, 7, 0, 5, 0}, 40)
	wide := webpHeader("VP8X", []byte{0, 0, 0, 0, 0x40, 0x1f, 0, 0, 0, 0}, 40)  // 8001 x 1
	animWebP := webpHeader("VP8X", []byte{0x02, 0, 0, 0, 6, 0, 0, 4, 0, 0}, 40) // the animation flag
	pal := image.NewPaletted(img.Rect, color.Palette{color.White, color.Black})
	var animGIF, loopGIF bytes.Buffer
	gif.EncodeAll(&animGIF, &gif.GIF{Image: []*image.Paletted{pal, pal}, Delay: []int{10, 10}})
	gif.EncodeAll(&loopGIF, &gif.GIF{Image: []*image.Paletted{pal}, Delay: []int{10}, LoopCount: 1}) // extensions, one frame
	badBlock := bytes.Clone(gifData.Bytes())
	badBlock[len(badBlock)-1] = 0x2a // no trailer: a byte that begins no block
	apng := pngWithChunk(pngData.Bytes(), "acTL", []byte{0, 0, 0, 2, 0, 0, 0, 0})
	withText := pngWithChunk(pngData.Bytes(), "tEXt", []byte("Title\x00a chart"))

	for _, c := range []struct {
		name string
		data []byte
		mime string
		w, h int
		why  string
	}{
		{"png", pngData.Bytes(), "image/png", 7, 5, ""},
		{"jpeg", jpegData.Bytes(), "image/jpeg", 7, 5, ""},
		{"gif", gifData.Bytes(), "image/gif", 7, 5, ""},
		{"webp lossless", vp8l, "image/webp", 7, 5, ""},
		{"webp extended", vp8x, "image/webp", 7, 5, ""},
		{"webp lossy", vp8, "image/webp", 7, 5, ""},
		{"png cut short", pngData.Bytes()[:pngData.Len()-1], "image/png", 0, 0, "damaged or cut short"},
		{"png bad CRC", badCRC, "image/png", 0, 0, "damaged or cut short"},
		{"jpeg cut short", jpegData.Bytes()[:jpegData.Len()-10], "image/jpeg", 0, 0, "damaged or cut short"},
		{"gif cut short", gifData.Bytes()[:gifData.Len()-1], "image/gif", 0, 0, "damaged or cut short"},
		{"webp cut short", vp8l[:36], "image/webp", 0, 0, "damaged or cut short"},
		{"webp too wide", wide, "image/webp", 8001, 1, "over 8000 pixels on a side"},
		{"png with text", withText, "image/png", 7, 5, ""},
		{"gif with extensions", loopGIF.Bytes(), "image/gif", 7, 5, ""},
		{"apng", apng, "image/png", 0, 0, "animated"},
		{"animated gif", animGIF.Bytes(), "image/gif", 0, 0, "animated"},
		{"animated webp", animWebP, "image/webp", 0, 0, "animated"},
		{"gif bad block", badBlock, "image/gif", 0, 0, "damaged or cut short"},
		{"bmp", []byte("BM\x00\x00\x00\x00\x00\x00\x00\x00"), "", 0, 0, "not a PNG, JPEG, GIF or WebP image"},
		{"empty", nil, "", 0, 0, "not a PNG, JPEG, GIF or WebP image"},
		{"signature only", []byte("\x89PNG\r\n\x1a\n"), "image/png", 0, 0, "damaged or cut short"},
	} {
		mime, w, h, why := checkImage(c.data)
		if mime != c.mime || w != c.w || h != c.h || why != c.why {
			t.Errorf("%s: %q %dx%d %q, want %q %dx%d %q", c.name, mime, w, h, why, c.mime, c.w, c.h, c.why)
		}
	}
}

// FuzzCheckImage: whatever a program writes, checking it as an image never
// panics, and what it accepts has a size within MaxImageSide.
func FuzzCheckImage(f *testing.F) {
	var buf bytes.Buffer
	png.Encode(&buf, image.NewGray(image.Rect(0, 0, 2, 2)))
	for _, seed := range [][]byte{buf.Bytes(), []byte("GIF89a"), []byte("\xff\xd8\xff"), webpHeader("VP8L", []byte{0x2f}, 30), []byte("RIFF\xff\xff\xff\xffWEBPVP8X")} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		mime, w, h, why := checkImage(data)
		if why == "" && (mime == "" || w < 1 || h < 1 || w > MaxImageSide || h > MaxImageSide) {
			t.Fatalf("accepted %q %dx%d", mime, w, h)
		}
	})
}

// BenchmarkCheckImage: the check of a PNG of about 1 MiB (noise), the
// largest image an answer gives by default.
func BenchmarkCheckImage(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 512, 512))
	rand.New(rand.NewSource(1)).Read(img.Pix) // noise: a PNG of about 1 MiB
	var buf bytes.Buffer
	png.Encode(&buf, img)
	b.SetBytes(int64(buf.Len()))
	for b.Loop() {
		if _, _, _, why := checkImage(buf.Bytes()); why != "" {
			b.Fatal(why)
		}
	}
}
