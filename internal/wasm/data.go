package wasm

import "fmt"

// DataSegment is one active data segment of the Guest: bytes written at
// Offset in memory 0 when an instance starts from scratch.
type DataSegment struct {
	Offset uint32
	Data   []byte
}

// SplitData returns the module without its data segments, and the segments.
// The Host compiles only the stripped module: an instance that starts from
// scratch gets the segments written by the Host before _initialize, and an
// instance that starts from a prepared image gets the image instead — without
// wazero writing the initial data over it (which would dirty every data page,
// and spoil copy-on-write).
func SplitData(module []byte) ([]byte, []DataSegment, error) {
	secs, err := sections(module)
	if err != nil {
		return nil, nil, err
	}
	var segments []DataSegment
	for i, s := range secs {
		switch s.id {
		case sectionData:
			if segments, err = parseData(s.payload); err != nil {
				return nil, nil, err
			}
			secs[i].payload = []byte{0} // no segments
		case sectionDataCount:
			secs[i].payload = []byte{0}
		}
	}
	return assemble(secs), segments, nil
}

// DataSegments returns the module's data segments, as SplitData does,
// without rewriting the module: what a Host whose stripped module came from
// a cache needs when it starts a Guest from scratch.
func DataSegments(module []byte) ([]DataSegment, error) {
	secs, err := sections(module)
	if err != nil {
		return nil, err
	}
	for _, s := range secs {
		if s.id == sectionData {
			return parseData(s.payload)
		}
	}
	return nil, nil
}

func parseData(section []byte) ([]DataSegment, error) {
	count, i, err := uleb(section, 0)
	if err != nil {
		return nil, err
	}
	segments := make([]DataSegment, 0, min(count, uint64(len(section))))
	for k := uint64(0); k < count; k++ {
		flags, n, err := uleb(section, i)
		if err != nil {
			return nil, err
		}
		i += n
		if flags != 0 {
			return nil, fmt.Errorf("data segment %d: only active segments of memory 0 are supported (flags %d)", k, flags)
		}
		// The offset must be a constant: i32.const N end.
		if i >= len(section) || section[i] != 0x41 {
			return nil, fmt.Errorf("data segment %d: offset is not i32.const", k)
		}
		offset, n, err := sleb64(section, i+1)
		if err != nil || offset < -1<<31 || offset >= 1<<31 {
			return nil, fmt.Errorf("data segment %d: bad offset", k)
		}
		i += 1 + n
		if i >= len(section) || section[i] != 0x0b {
			return nil, fmt.Errorf("data segment %d: offset expression is not a single constant", k)
		}
		i++
		length, n, err := uleb(section, i)
		if err != nil {
			return nil, err
		}
		i += n
		if i+int(length) > len(section) || i+int(length) < i {
			return nil, fmt.Errorf("data segment %d runs past its section", k)
		}
		segments = append(segments, DataSegment{Offset: uint32(offset), Data: section[i : i+int(length)]})
		i += int(length)
	}
	return segments, nil
}
