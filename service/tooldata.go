package service

import (
	"fmt"
	"net/http"

	"github.com/spine-run/spine"
	"github.com/spine-run/spine/codemode"
)

// fileData is what POST /v1/tool/call?file_data= asks for beside the text:
// nothing (the default), the images with their data, or every file's data
// too.
type fileData string

const (
	fileDataNone   fileData = "none"
	fileDataImages fileData = "images"
	fileDataAll    fileData = "all"
)

// fileDataOf reads the file_data query parameter of r.
func fileDataOf(r *http.Request) (fileData, error) {
	switch v := fileData(r.URL.Query().Get("file_data")); v {
	case "", fileDataNone:
		return fileDataNone, nil
	case fileDataImages, fileDataAll:
		return v, nil
	default:
		return "", fmt.Errorf("file_data %q is not none, images or all", string(v))
	}
}

// ToolImage is an image of ToolAnswer.Images: codemode.Image with its data,
// base64 in the JSON.
type ToolImage struct {
	codemode.Image
	Data []byte `json:"data"`
}

// withData adds to a what data asks for of res.
func (a *ToolAnswer) withData(res *codemode.Result, data fileData) {
	if data == fileDataNone {
		return
	}
	a.Images = []ToolImage{} // asked for: [] rather than absent when there are none
	for _, im := range res.Images {
		a.Images = append(a.Images, ToolImage{Image: im, Data: im.Data})
	}
	if data != fileDataAll {
		return
	}
	a.Files = []spine.File{}
	if res.Output != nil {
		a.Files = append(a.Files, res.Output.Files...)
	}
}

// answerToolData writes res as a ToolAnswer, with what data asks for.
func (s *Server) answerToolData(w http.ResponseWriter, status int, res *codemode.Result, data fileData) {
	a := toolAnswer(res)
	a.withData(res, data)
	writeJSON(w, status, a)
}
