package webhook

import (
	"strconv"
	"strings"
)

// PatchOp is one RFC 6902 JSON patch operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// pointerEscaper escapes one RFC 6901 reference token: "~" must become "~0" before "/"
// becomes "~1", or "a/b" and "a~1b" would collide.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// Pointer builds an RFC 6901 JSON pointer from unescaped reference tokens, so that a token
// such as the annotation key "gpu.scheduling/gpu-ids" becomes "gpu.scheduling~1gpu-ids"
// instead of two path levels.
func Pointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}

// index formats a JSON array index as a pointer token.
func index(i int) string { return strconv.Itoa(i) }
