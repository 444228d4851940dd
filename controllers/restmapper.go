package controllers

import (
	"net/http"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// newRESTMapper is controller-runtime's dynamic REST mapper with its answers to RESTMapping kept.
// A cache restricted to namespaces maps the object's kind on every Get and List, and the dynamic
// mapper answers each time by walking every group it knows, which at many pending calls is a large
// share of what the manager allocates per decision (see docs/performance.md). A kind's mapping does not change while the manager runs
// (a resource's scope is fixed when it is defined), so a found mapping is kept; what was not found is
// asked again, as the dynamic mapper then looks the group up.
func newRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	m, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return &keptMappings{RESTMapper: m}, nil
}

// keptMappings answers RESTMapping for one kind and at most one version from what its RESTMapper
// answered before.
type keptMappings struct {
	meta.RESTMapper
	kept sync.Map // mappingKey -> meta.RESTMapping
}

type mappingKey struct {
	gk      schema.GroupKind
	version string
}

func (k *keptMappings) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if len(versions) > 1 {
		return k.RESTMapper.RESTMapping(gk, versions...)
	}
	key := mappingKey{gk: gk}
	if len(versions) == 1 {
		key.version = versions[0]
	}
	if m, ok := k.kept.Load(key); ok {
		// A copy: what a caller does with its mapping never changes the next caller's.
		c := m.(meta.RESTMapping)
		return &c, nil
	}
	m, err := k.RESTMapper.RESTMapping(gk, versions...)
	if err != nil {
		return nil, err
	}
	k.kept.Store(key, *m)
	return m, nil
}
