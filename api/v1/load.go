package v1

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Document is one KindCustomHttp read from a file, with where it came from.
type Document struct {
	// File is the path it was read from; Index is its position among the file's documents
	// (1-based, counting empty ones); Line is the line its document starts on (1-based).
	File  string
	Index int
	Line  int
	// Object is the converted object; Desired its validated desired state.
	Object  *KindCustomHttp
	Desired Desired
}

// Where is "FILE: document N (line L)", how errors name a document.
func (d Document) Where() string {
	return fmt.Sprintf("%s: document %d (line %d)", d.File, d.Index, d.Line)
}

// LoadOptions tune LoadDocuments.
type LoadOptions struct {
	// Namespace is used for documents without metadata.namespace. Default "default".
	Namespace string
	// IgnoreOtherKinds skips documents that are not groupsp.measutosh.dev/v1 KindCustomHttp
	// (a directory of mixed manifests); by default they are errors.
	IgnoreOtherKinds bool
}

// LoadDocuments reads every KindCustomHttp from paths: files, or directories whose *.yaml,
// *.yml and *.json files are read in name order (not recursively). A file may hold several
// YAML documents separated by "---". Every document is converted and validated before
// anything is returned, and every problem found is reported in one error, each naming the
// file, the document and its line, and the field: YAML that does not parse, a document of
// another kind or group, an unknown or mistyped field, a missing required field, a value out
// of range, and two documents naming the same namespace/name. No document means an error too.
func LoadDocuments(paths []string, opts LoadOptions) ([]Document, error) {
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	files, err := expand(paths)
	if err != nil {
		return nil, err
	}
	var docs []Document
	var errs []error
	seen := map[string]Document{}
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", file, err))
			continue
		}
		for _, raw := range splitDocuments(string(b)) {
			d := Document{File: file, Index: raw.index, Line: raw.line}
			obj, err := decode(raw, opts)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.Where(), err))
				continue
			}
			if obj == nil { // empty, or another kind with IgnoreOtherKinds
				continue
			}
			desired, err := Resolve(obj)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", d.Where(), err))
				continue
			}
			d.Object, d.Desired = obj, desired
			id := obj.Namespace + "/" + obj.Name
			if first, dup := seen[id]; dup {
				errs = append(errs, fmt.Errorf("%s: KindCustomHttp %s is also defined at %s: each object may appear once", d.Where(), id, first.Where()))
				continue
			}
			seen[id] = d
			docs = append(docs, d)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("no KindCustomHttp found in %s", strings.Join(paths, ", "))
	}
	return docs, nil
}

func expand(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, errors.New("no file given: pass -f FILE or -f DIR")
	}
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, fmt.Errorf("read directory %s: %w", p, err)
		}
		var in []string
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				if !e.IsDir() {
					in = append(in, filepath.Join(p, e.Name()))
				}
			}
		}
		sort.Strings(in)
		files = append(files, in...)
	}
	return files, nil
}

type rawDocument struct {
	text        string
	index, line int
}

// docSeparator is a YAML document start marker on a line of its own (a comment may follow).
var docSeparator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits a multi-document YAML stream at "---" lines, remembering where each
// document starts. (k8s.io/apimachinery's YAMLReader splits the same way but loses the line
// numbers that error messages need.)
func splitDocuments(s string) []rawDocument {
	var docs []rawDocument
	cur := rawDocument{index: 1, line: 1}
	var b strings.Builder
	for i, line := range strings.Split(s, "\n") {
		if docSeparator.MatchString(strings.TrimRight(line, "\r")) {
			if i > 0 {
				cur.text = b.String()
				docs = append(docs, cur)
				cur = rawDocument{index: cur.index + 1}
			}
			cur.line = i + 2
			b.Reset()
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	cur.text = b.String()
	return append(docs, cur)
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// decode parses one document; nil, nil for an empty one or a skipped other kind.
func decode(raw rawDocument, opts LoadOptions) (*KindCustomHttp, error) {
	obj := map[string]any{}
	if err := yaml.Unmarshal([]byte(raw.text), &obj); err != nil {
		// Make the parser's document-relative line absolute.
		msg := yamlLine.ReplaceAllStringFunc(err.Error(), func(m string) string {
			n, _ := strconv.Atoi(m[len("line "):])
			return fmt.Sprintf("line %d", raw.line+n-1)
		})
		return nil, fmt.Errorf("YAML does not parse: %s", msg)
	}
	if len(obj) == 0 {
		return nil, nil
	}
	u := &unstructured.Unstructured{Object: obj}
	if u.GroupVersionKind() != GroupVersionKind {
		if opts.IgnoreOtherKinds {
			return nil, nil
		}
		return nil, fmt.Errorf("apiVersion %q kind %q is not %s %s (pass --ignore-other-kinds to skip such documents)",
			u.GetAPIVersion(), u.GetKind(), GroupVersion.String(), Kind)
	}
	if u.GetNamespace() == "" {
		u.SetNamespace(opts.Namespace)
	}
	return FromUnstructured(u)
}
