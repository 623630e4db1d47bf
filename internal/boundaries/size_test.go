package boundaries

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// maxProductLines is the most lines a hand-written product Go file may have: a file that grows
// past it holds more than one idea, and is split so that each reads top-down.
const maxProductLines = 400

// repoRoot is the repository's root, relative to this package's directory.
const repoRoot = "../.."

// outsideProduct are the directories, relative to the repository root, whose Go files are not
// the product: tests and tools, and what builds and runs put there.
var outsideProduct = []string{"hack", "test", "internal/testenv", ".local", "bin", ".git"}

// generated is the line Go's convention puts in a generated file (`go help generate`).
var generated = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

// TestProductFilesSmall fails for every hand-written, non-test Go file of the product (both
// modules: the operator's and agent/) longer than maxProductLines.
func TestProductFilesSmall(t *testing.T) {
	var checked int
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() {
			for _, dir := range outsideProduct {
				if rel == dir {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		if isGenerated(b) {
			return nil
		}
		if n := bytes.Count(b, []byte("\n")); n > maxProductLines {
			t.Errorf("%s has %d lines, more than %d: split it by what its parts do", rel, n, maxProductLines)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk the repository: %v", err)
	}
	if checked < 100 {
		t.Fatalf("checked %d product Go files; expected the whole repository (is %s its root?)", checked, repoRoot)
	}
}

// isGenerated reports whether a Go file's text has the generated-code line before its package
// clause.
func isGenerated(src []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(src))
	for sc.Scan() {
		line := sc.Text()
		if generated.MatchString(line) {
			return true
		}
		if strings.HasPrefix(line, "package ") {
			return false
		}
	}
	return false
}
