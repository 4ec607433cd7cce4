//go:build linux

package engine

import (
	"bytes"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestSharedImage: mapped over memory its caller reserved, the image reads
// as itself; after writes over it, Reset brings it back byte for byte, and
// the caller's memory past the image is left alone.
func TestSharedImage(t *testing.T) {
	data := make([]byte, 16*WasmPageSize)
	for i := range data {
		if i/StatePageSize%2 == 0 {
			data[i] = byte(i*13 + 5)
		}
	}
	img, err := NewSharedImage(data)
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if img.Size() != len(data) {
		t.Fatalf("Size %d, want %d", img.Size(), len(data))
	}
	// The other engine's memory: twice the image, the image over its start.
	buf, err := unix.Mmap(-1, 0, 2*len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	mem, err := img.MapOver(unsafe.Pointer(&buf[0]))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:len(data)], data) {
		t.Fatal("the mapped memory does not read as the image")
	}
	for i := 0; i < len(buf); i += 3001 {
		buf[i] ^= 0xff
	}
	if err := mem.Reset(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf[:len(data)], data) {
		t.Fatal("after Reset the memory differs from the image")
	}
	if buf[len(data)/3001*3001+3001] != 0xff {
		t.Fatal("Reset changed memory past the image")
	}
	if _, err := NewSharedImage(data[:100]); err == nil {
		t.Fatal("an image of 100 bytes was taken")
	}
}
