package main

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	src := `package x

import "flag"

// Raised after a burst (scale-5k, 2026-11-25 23:31: 0.33 per pod).
var a = 1

var layout = "2006-01-02" // Go's reference time; 2006-01-02 in a comment is fine too.

var created = "2025-05-20T12:00:00Z" // a string that is not a help text is data

func f(fs *flag.FlagSet) {
	var d int
	fs.IntVar(&d, "n", 1, "How many. "+
		"Raised on 2026-11-02.")
	_ = fs.String("s", "2024-01-01", "plain help")
	cmd := struct{ Short, Long, Use string }{Use: "2023-03-03", Long: "Since 2027-01-31 the default."}
	_ = cmd
}
`
	found, err := check("x.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, f.what+" "+f.date)
	}
	want := []string{"comment 2026-11-25", "help text 2026-11-02", "help text 2027-01-31"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Errorf("findings:\n got %q\nwant %q", got, want)
	}
}

func TestCheckRejectsBrokenGo(t *testing.T) {
	if _, err := check("x.go", []byte("package x\nfunc {")); err == nil || !strings.Contains(err.Error(), "x.go") {
		t.Errorf("a file that does not parse: err %v, want one naming the file", err)
	}
}
