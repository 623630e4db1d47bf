// Package markers for controller-gen (`make manifests`): the API group and version of every
// kind in this package. They sit in a comment of their own, apart from the package doc in
// types.go, as Kubernetes' own doc.go files keep them. No deepcopy is generated (the
// operator handles KindCustomHttp objects as unstructured ones and converts them with
// FromUnstructured), hence object:generate=false.
//
// +groupName=groupsp.measutosh.dev
// +versionName=v1
// +kubebuilder:object:generate=false

package v1
