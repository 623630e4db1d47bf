// Package markers for controller-gen (`make manifests`): the API group and version of every
// kind in this package. They sit in a comment of their own, apart from the package doc in
// types.go, as Kubernetes' own doc.go files keep them. DeepCopy (zz_generated.deepcopy.go) is
// generated for the API types in types.go, each marked object:generate=true, and for no other
// type of the package, hence object:generate=false here.
//
// +groupName=groupsp.measutosh.dev
// +versionName=v1
// +kubebuilder:object:generate=false

package v1
