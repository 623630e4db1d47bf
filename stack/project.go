package stack

import (
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
)

// ProjectFile is what the operator reads from a Pulumi.yaml: the project name and, if set,
// the backend URL.
type ProjectFile struct {
	Name       string
	BackendURL string
}

// LoadProjectFile reads a Pulumi project file (Pulumi.yaml) at path. Errors name the file
// and, from Pulumi's own schema check, the field that is wrong.
func LoadProjectFile(path string) (ProjectFile, error) {
	p, err := workspace.LoadProject(path)
	if err != nil {
		return ProjectFile{}, fmt.Errorf("read project file %s: %w", path, err)
	}
	pf := ProjectFile{Name: string(p.Name)}
	if p.Backend != nil {
		pf.BackendURL = p.Backend.URL
	}
	return pf, nil
}
