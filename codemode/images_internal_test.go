package codemode

import (
	"bytes"
	"encoding/binary"
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

// TestCheckImage: each format the APIs take is known by its bytes, with its
// size in pixels; one cut short, damaged or too large is refused with why.
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
	wide := webpHeader("VP8X", []byte{0, 0, 0, 0, 0x40, 0x1f, 0, 0, 0, 0}, 40) // 8001 x 1

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
