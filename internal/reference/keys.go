package reference

// Keys returns every Idempotency-Key the default instance (the static credential's) has used, with the
// id of the request it created: the audit that each caller key created exactly one request, also
// served to the admin as GET /admin/v1/keys.
func (s *Server) Keys() (map[string]string, error) {
	return s.KeysOf(s.defaultInstance.ID)
}

// KeysOf is Keys for any instance: keys are scoped to the instance that used them.
func (s *Server) KeysOf(instance string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.keysOf(instance)
}
