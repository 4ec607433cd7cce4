package codemode

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/gif"
	"image/jpeg"
	"image/png"
	"strings"

	"github.com/spine-run/spine"
)

// The defaults of Options.MaxImages, MaxImageBytes and MaxAnswerImageBytes.
// DefaultMaxImages is small because a request carries every image of the
// conversation before it: Anthropic's messages API refuses one with more
// than 100 images (600 for some models), or with more than 20 and one over
// 2000 pixels a side.
const (
	DefaultMaxImages           = 8
	DefaultMaxImageBytes       = 1 << 20
	DefaultMaxAnswerImageBytes = 4 << 20
)

// MaxImageSide is the most pixels an image given to the model may have on a
// side, the largest the model APIs take (Anthropic's messages API refuses a
// request with a larger one).
const MaxImageSide = 8000

// An Image is an image the program made, for the model to see: a file it
// wrote in its working directory, or an image format (image/png,
// image/jpeg, ...) of a value it displayed or of the run's value. Only still
// PNG, JPEG, GIF and WebP images are given, the formats the model APIs take,
// known by their bytes (not by a file's name). What is checked, since a model
// API refuses a whole request over one image it cannot take, is the
// structure, not the pixels: a header that decodes to a size of 1 to
// MaxImageSide pixels a side; for a PNG every chunk to IEND, checksums
// included, and no acTL chunk (an animated PNG); for a JPEG the end-of-image
// marker; for a GIF every block to the trailer and one image in them (not an
// animation); for a WebP a RIFF size within the data, a VP8, VP8L or VP8X
// first chunk, and no animation flag in a VP8X. The compressed pixel data is
// not decoded: an image damaged inside it passes. Nor can the caps of a
// whole request be checked here (Anthropic's: 100 images, and 2000 pixels a
// side past 20 images), since a request carries the conversation's earlier
// images too: Options.MaxImages keeps each answer's count small, and an
// agent loop whose conversation grows long drops its old turns' images.
//
// An agent loop sends each after the Result's text, in the same tool
// result, in its API's shape:
//
//   - Anthropic's messages API: an image block in the tool_result's
//     content, {"type": "image", "source": {"type": "base64",
//     "media_type": MIMEType, "data": Base64()}};
//   - MCP: an ImageContent of Data and MIMEType (package mcpserver);
//   - OpenAI's chat completions, whose tool messages hold only text: after
//     the tool messages of the turn, a user message with an image_url part
//     {"type": "image_url", "image_url": {"url": DataURL()}} for each,
//     headed by a text part naming the call (examples/openai).
type Image struct {
	// Source is where the image comes from: "file" (Name is the file's
	// name), "display" (Index is which of Output.Displayed, from 1) or
	// "value" (the run's value's display).
	Source string `json:"source"`
	Name   string `json:"name,omitempty"`
	Index  int    `json:"index,omitempty"`

	// MIMEType is "image/png", "image/jpeg", "image/gif" or "image/webp",
	// from the image's bytes.
	MIMEType string `json:"mime_type"`
	Width    int    `json:"width"`
	Height   int    `json:"height"`
	Bytes    int    `json:"bytes"`

	// Data is the image's bytes.
	Data []byte `json:"-"`
}

// Base64 returns the image's bytes in standard base64, as the APIs take it.
func (im *Image) Base64() string { return base64.StdEncoding.EncodeToString(im.Data) }

// DataURL returns the image as a data URL, data:image/png;base64,...: the
// image_url of OpenAI's API.
func (im *Image) DataURL() string { return "data:" + im.MIMEType + ";base64," + im.Base64() }

// Label names the image for the model: the file's name, "display 2" or
// "the value".
func (im *Image) Label() string {
	switch im.Source {
	case "file":
		return im.Name
	case "display":
		return fmt.Sprintf("display %d", im.Index)
	}
	return "the value"
}

// images are the images of a successful run, in the order a notebook shows
// them (the displays, then the value's display), then the files in the
// order of Output.Files; at most o.MaxImages of them, each at most
// o.MaxImageBytes and all together at most o.MaxAnswerImageBytes. leftOut
// says, for the model, which were left out and why ("2 images left out:
// over the 1 MiB limit per image (big.png, display 3)"); "" when none was.
func images(out *spine.Output, o *Options) (kept []Image, leftOut string) {
	each, total := o.MaxImageBytes, o.MaxAnswerImageBytes
	if out == nil || each < 0 || total < 0 {
		return nil, ""
	}
	candidates, skipped := imageCandidates(out)
	room := total
	for _, im := range candidates {
		im.Bytes = len(im.Data)
		var why string
		switch {
		case im.Bytes > each: // before the check, which reads it all
			why = "over the " + size(int64(each)) + " limit per image"
		case im.Bytes > room:
			why = "over the " + size(int64(total)) + " limit per answer"
		case len(kept) == o.MaxImages:
			why = fmt.Sprintf("over the limit of %d images per answer", o.MaxImages)
		default:
			im.MIMEType, im.Width, im.Height, why = checkImage(im.Data)
		}
		if why != "" {
			skipped = append(skipped, skip{im.Label(), why})
			continue
		}
		room -= im.Bytes
		kept = append(kept, im)
	}
	return kept, leftOutText(skipped)
}

// imageCandidates are the images of out before the checks and caps: one
// for each display with a PNG, JPEG, GIF or WebP format (by its bytes),
// then each file that is one; skipped has the displays whose image formats
// are none of those.
func imageCandidates(out *spine.Output) (candidates []Image, skipped []skip) {
	fromDisplay := func(d spine.Display, im Image) {
		types := displayImageTypes(d)
		for _, mime := range types {
			data, err := base64.StdEncoding.DecodeString(d[mime])
			if err == nil && sniffImage(data) != "" {
				im.Data = data
				candidates = append(candidates, im)
				return // one image a display, as a notebook shows one
			}
		}
		if len(types) > 0 {
			skipped = append(skipped, skip{im.Label(), "not a PNG, JPEG, GIF or WebP image"})
		}
	}
	for i, d := range out.Displayed {
		fromDisplay(d, Image{Source: "display", Index: i + 1})
	}
	fromDisplay(out.Display, Image{Source: "value"})
	for _, f := range out.Files {
		if sniffImage(f.Data) != "" {
			candidates = append(candidates, Image{Source: "file", Name: f.Name, Data: f.Data})
		}
	}
	return candidates, skipped
}

// skip is an image left out: its label, and why.
type skip struct{ label, why string }

// leftOutLabels is the most images leftOutText names for one reason; it
// counts the others ("and 240 more"), since the files are listed anyway.
const leftOutLabels = 10

// leftOutText says which images were left out, grouped by why, in the
// order of the first of each.
func leftOutText(skipped []skip) string {
	if len(skipped) == 0 {
		return ""
	}
	var whys []string
	labels := map[string][]string{}
	for _, s := range skipped {
		if labels[s.why] == nil {
			whys = append(whys, s.why)
		}
		labels[s.why] = append(labels[s.why], s.label)
	}
	var b strings.Builder
	if len(skipped) == 1 {
		b.WriteString("1 image left out: ")
	} else {
		fmt.Fprintf(&b, "%d images left out: ", len(skipped))
	}
	for i, why := range whys {
		if i > 0 {
			b.WriteString("; ")
		}
		named := labels[why]
		more := ""
		if len(named) > leftOutLabels {
			named, more = named[:leftOutLabels], fmt.Sprintf(" and %d more", len(named)-leftOutLabels)
		}
		fmt.Fprintf(&b, "%s (%s%s)", why, strings.Join(named, ", "), more)
	}
	return b.String()
}

// displayImageTypes are the image formats of d a model may be shown, in the
// order tried: PNG first, as a notebook prefers it. SVG is text, not among
// them.
func displayImageTypes(d spine.Display) []string {
	var types []string
	for _, mime := range []string{"image/png", "image/jpeg", "image/gif", "image/webp"} {
		if _, ok := d[mime]; ok {
			types = append(types, mime)
		}
	}
	return types
}

// sniffImage returns the MIME type of data from its first bytes, when it is
// a PNG, JPEG, GIF or WebP image; else "".
func sniffImage(data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(data, []byte("GIF87a")), bytes.HasPrefix(data, []byte("GIF89a")):
		return "image/gif"
	case len(data) >= 16 && string(data[:4]) == "RIFF" && string(data[8:14]) == "WEBPVP":
		return "image/webp"
	}
	return ""
}

// errAnimated is an image with more than one frame: an animated GIF, PNG
// (APNG) or WebP, which at least one model API refuses (OpenAI's takes
// non-animated GIFs only).
var errAnimated = errors.New("animated")

// checkImage returns data's MIME type and size in pixels, or why it cannot
// be given to a model: its header does not decode, it is cut short, it is
// animated, or it is larger than MaxImageSide. Image says what is checked.
func checkImage(data []byte) (mime string, width, height int, why string) {
	mime = sniffImage(data)
	var cfg image.Config
	var err error
	switch mime {
	case "image/png":
		if err = pngWhole(data); err == nil {
			cfg, err = png.DecodeConfig(bytes.NewReader(data))
		}
	case "image/jpeg":
		cfg, err = jpeg.DecodeConfig(bytes.NewReader(data))
		if err == nil && !bytes.HasSuffix(bytes.TrimRight(data, "\x00"), []byte{0xff, 0xd9}) {
			err = errors.New("no end of image")
		}
	case "image/gif":
		if err = gifStill(data); err == nil {
			cfg, err = gif.DecodeConfig(bytes.NewReader(data))
		}
	case "image/webp":
		cfg, err = webpConfig(data)
	default:
		return "", 0, 0, "not a PNG, JPEG, GIF or WebP image"
	}
	switch {
	case errors.Is(err, errAnimated):
		return mime, 0, 0, "animated"
	case err != nil:
		return mime, 0, 0, "damaged or cut short"
	case cfg.Width <= 0 || cfg.Height <= 0:
		return mime, 0, 0, "damaged or cut short"
	case cfg.Width > MaxImageSide || cfg.Height > MaxImageSide:
		return mime, cfg.Width, cfg.Height, fmt.Sprintf("over %d pixels on a side", MaxImageSide)
	}
	return mime, cfg.Width, cfg.Height, ""
}

// pngWhole checks a PNG's chunks from its signature to IEND: each within
// the data, its CRC right, IHDR first; errAnimated when one is acTL, the
// animation control of an APNG.
func pngWhole(data []byte) error {
	rest := data[8:]
	for first := true; ; first = false {
		if len(rest) < 12 {
			return errors.New("cut short")
		}
		n := binary.BigEndian.Uint32(rest)
		if uint64(n) > uint64(len(rest)-12) {
			return errors.New("cut short")
		}
		kind := rest[4:8]
		if first && string(kind) != "IHDR" {
			return errors.New("no IHDR")
		}
		if crc32.ChecksumIEEE(rest[4:8+n]) != binary.BigEndian.Uint32(rest[8+n:]) {
			return errors.New("bad CRC")
		}
		switch string(kind) {
		case "IEND":
			return nil
		case "acTL":
			return errAnimated
		}
		rest = rest[12+n:]
	}
}

// gifStill walks a GIF's blocks from its screen descriptor to the trailer:
// each within the data, one image among them; errAnimated for a second.
func gifStill(data []byte) error {
	cut := errors.New("cut short")
	if len(data) < 13 {
		return cut
	}
	p := 13 // the header and the logical screen descriptor
	if flags := data[10]; flags&0x80 != 0 {
		p += 3 << (flags&7 + 1) // the global color table
	}
	frames := 0
	for {
		if p >= len(data) {
			return cut
		}
		switch data[p] {
		case 0x3b: // the trailer
			if frames == 0 {
				return errors.New("no image")
			}
			return nil
		case 0x21: // an extension: its label, then its sub-blocks
			p += 2
		case 0x2c: // an image: its descriptor, local color table, LZW code size, then its sub-blocks
			if frames++; frames > 1 {
				return errAnimated
			}
			if p+10 > len(data) {
				return cut
			}
			flags := data[p+9]
			p += 10
			if flags&0x80 != 0 {
				p += 3 << (flags&7 + 1)
			}
			p++
		default:
			return errors.New("not a block")
		}
		for { // sub-blocks, each its length then its bytes, to an empty one
			if p >= len(data) {
				return cut
			}
			n := int(data[p])
			p += 1 + n
			if n == 0 {
				break
			}
		}
	}
}

// webpConfig reads a WebP's size from its first chunk (VP8, VP8L or VP8X),
// after checking that the RIFF holds as many bytes as it says;
// errAnimated when a VP8X has the animation flag.
func webpConfig(data []byte) (image.Config, error) {
	var cfg image.Config
	if len(data) < 30 || int64(binary.LittleEndian.Uint32(data[4:])) > int64(len(data)-8) {
		return cfg, errors.New("cut short")
	}
	chunk := data[12:16]
	b := data[20:]
	switch string(chunk) {
	case "VP8 ": // a key frame: 3 bytes of tag, the start code, then 14-bit sizes
		if b[3] != 0x9d || b[4] != 0x01 || b[5] != 0x2a {
			return cfg, errors.New("no VP8 start code")
		}
		cfg.Width = int(binary.LittleEndian.Uint16(b[6:]) & 0x3fff)
		cfg.Height = int(binary.LittleEndian.Uint16(b[8:]) & 0x3fff)
	case "VP8L": // the signature 0x2f, then 14 bits each of width-1 and height-1
		if b[0] != 0x2f {
			return cfg, errors.New("no VP8L signature")
		}
		bits := binary.LittleEndian.Uint32(b[1:])
		cfg.Width = int(bits&0x3fff) + 1
		cfg.Height = int(bits>>14&0x3fff) + 1
	case "VP8X": // flags, then 24 bits each of width-1 and height-1
		if b[0]&0x02 != 0 { // the animation flag
			return cfg, errAnimated
		}
		cfg.Width = int(uint32(b[4])|uint32(b[5])<<8|uint32(b[6])<<16) + 1
		cfg.Height = int(uint32(b[7])|uint32(b[8])<<8|uint32(b[9])<<16) + 1
	default:
		return cfg, errors.New("no VP8 chunk")
	}
	return cfg, nil
}
