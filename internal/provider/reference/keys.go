package reference

// Keys returns every Idempotency-Key the server has seen, with the id of the request it created.
// Audits use it to check that each caller key created exactly one request.
func (s *Server) Keys() (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.store.keys()
}
