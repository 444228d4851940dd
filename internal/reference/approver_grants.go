package reference

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	bolt "go.etcd.io/bbolt"

	"toolgate.dev/toolgate/internal/provider"
)

// Approver scopes. A scoped approver (Options.ApproverInstances) sees and decides only the requests
// of the instances in their scope, named by instance id: the provider issues ids, while instance names
// are chosen by whoever holds the provisioner token, so a scope by name would let a provisioner put
// its requests in front of another team's approver. Since ids are known only once an instance is
// provisioned, the admin grants a scoped approver further instances through the admin API, and the
// grants are kept in the store:
//
//	GET    /admin/v1/approvers                          every approver and their scope
//	PUT    /admin/v1/approvers/{name}/instances/{id}    grant instance id to a scoped approver
//	DELETE /admin/v1/approvers/{name}/instances/{id}    revoke that grant
//
// An approver's scope is the instances of Options.ApproverInstances and those granted; an approver
// without an entry in ApproverInstances sees every instance, as the admin does, and is given no
// grants (400: give them a scope first).

// bucketGrants holds the instances granted to scoped approvers: approver \x00 instance id -> grant.
var bucketGrants = []byte("approver_grants")

// grant is one instance granted to an approver through the admin API.
type grant struct {
	GrantedAt time.Time `json:"granted_at"`
}

// ApproverScope is an approver as GET /admin/v1/approvers shows them: whether they are scoped, and
// the instances they see if so (configured ones and granted ones, by id).
type ApproverScope struct {
	Name       string   `json:"name"`
	Scoped     bool     `json:"scoped"`
	Configured []string `json:"configured_instances,omitempty"`
	Granted    []string `json:"granted_instances,omitempty"`
}

// checkScopes refuses scopes that name no approver, or an instance by anything but its id.
func checkScopes(opts Options) error {
	for name, scope := range opts.ApproverInstances {
		if _, ok := opts.Approvers[name]; !ok {
			return fmt.Errorf("ApproverInstances names %s, who is not one of Approvers", name)
		}
		for _, id := range scope {
			if _, err := uuid.Parse(id); err != nil {
				return fmt.Errorf("approver %s's scope names %q, which is not an instance id: a scope names instances by the id "+
					"the provider issued (a UUID), never by name, which the provisioner chooses", name, id)
			}
		}
	}
	return nil
}

// sees reports whether approver may see and decide a request of instance (its id): the admin and an
// approver without a scope see every instance; a scoped approver, those configured or granted. The
// caller holds s.mu.
func (s *Server) sees(approver, instance string) bool {
	scope, scoped := s.opts.ApproverInstances[approver]
	if approver == AdminApprover || !scoped {
		return true
	}
	return slices.Contains(scope, instance) || s.grants[approver][instance]
}

// seesRequest is sees for one request, by id; an unknown request is seen by nobody.
func (s *Server) seesRequest(approver, id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, err := s.loadLocked(id)
	return err == nil && s.sees(approver, rec.Instance)
}

func (s *Server) grantRoutes(mux *http.ServeMux) {
	mux.Handle("GET /admin/v1/approvers", s.adminAPI(s.handleApprovers))
	mux.Handle("PUT /admin/v1/approvers/{name}/instances/{id}", s.adminAPI(s.handleGrant))
	mux.Handle("DELETE /admin/v1/approvers/{name}/instances/{id}", s.adminAPI(s.handleRevoke))
}

func (s *Server) handleApprovers(*http.Request) reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(maps.Keys(s.opts.Approvers))
	out := make([]ApproverScope, 0, len(names))
	for _, name := range names {
		out = append(out, s.scopeLocked(name))
	}
	return success(http.StatusOK, out)
}

func (s *Server) scopeLocked(name string) ApproverScope {
	scope, scoped := s.opts.ApproverInstances[name]
	return ApproverScope{Name: name, Scoped: scoped, Configured: slices.Clone(scope), Granted: slices.Sorted(maps.Keys(s.grants[name]))}
}

// grantTarget checks a grant's approver and instance; it returns a failure, or nothing. The caller
// holds s.mu.
func (s *Server) grantTarget(name, id string) (reply, bool) {
	if _, ok := s.opts.Approvers[name]; !ok {
		return fail(provider.CodeNotFound, "no approver "+quote(name)), false
	}
	if _, scoped := s.opts.ApproverInstances[name]; !scoped {
		return fail(provider.CodeInvalidRequest, fmt.Sprintf("approver %s has no scope and sees every instance: give them one first "+
			"(instances= in the approvers file, empty to start with none)", name)), false
	}
	if ir, ok := s.instances[id]; id != defaultInstanceID && (!ok || ir.deleted()) {
		return fail(provider.CodeNotFound, "no instance "+quote(id)+": grant an instance by the id the provider issued"), false
	}
	return reply{}, true
}

func (s *Server) handleGrant(r *http.Request) reply {
	name, id := r.PathValue("name"), r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if rp, ok := s.grantTarget(name, id); !ok {
		return rp
	}
	if !s.grants[name][id] {
		if err := s.store.putGrant(name, id, grant{GrantedAt: s.now()}); err != nil {
			return s.failure(err, "")
		}
		if s.grants[name] == nil {
			s.grants[name] = map[string]bool{}
		}
		s.grants[name][id] = true
		s.log.Info("instance granted to an approver", "approver", name, "instance", id)
	}
	return success(http.StatusOK, s.scopeLocked(name))
}

func (s *Server) handleRevoke(r *http.Request) reply {
	name, id := r.PathValue("name"), r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.opts.Approvers[name]; !ok {
		return fail(provider.CodeNotFound, "no approver "+quote(name))
	}
	if slices.Contains(s.opts.ApproverInstances[name], id) {
		return fail(provider.CodeInvalidRequest, fmt.Sprintf("instance %s is in approver %s's configured scope: remove it there (the approvers file)", id, name))
	}
	if s.grants[name][id] {
		if err := s.store.deleteGrant(name, id); err != nil {
			return s.failure(err, "")
		}
		delete(s.grants[name], id)
		s.log.Info("instance grant revoked", "approver", name, "instance", id)
	}
	return success(http.StatusOK, s.scopeLocked(name))
}

// loadGrants reads the grants of the approvers that still have a scope; grants to approvers no
// longer scoped (or no longer configured) are kept in the store but give nothing.
func (s *Server) loadGrants() error {
	keys, err := s.store.grantKeys()
	if err != nil {
		return err
	}
	for _, key := range keys {
		name, id, _ := strings.Cut(key, "\x00")
		if s.grants[name] == nil {
			s.grants[name] = map[string]bool{}
		}
		s.grants[name][id] = true
	}
	return nil
}

// grantKey is the store key of instance granted to approver.
func grantKey(approver, instance string) string { return approver + "\x00" + instance }

func (st *store) putGrant(approver, instance string, g grant) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		return put(tx.Bucket(bucketGrants), grantKey(approver, instance), g)
	})
}

func (st *store) deleteGrant(approver, instance string) error {
	return st.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketGrants).Delete([]byte(grantKey(approver, instance)))
	})
}

// grantKeys returns the key of every stored grant (grantKey).
func (st *store) grantKeys() ([]string, error) {
	var out []string
	err := st.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketGrants).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}
