package reference

import (
	"errors"
	"net/http"

	"toolgate.dev/toolgate/internal/provider"
)

// instanceFields are the fields of ProvisionInstanceRequest and UpdateInstanceRequest.
var instanceFields = []string{"instance_name", "delivery"}

// instanceBody is a validated ProvisionInstanceRequest or UpdateInstanceRequest.
type instanceBody struct {
	name           *string
	delivery       *deliveryConfig
	removeDelivery bool
	fingerprint    string
}

// parseInstanceBody validates the body of POST /v1/instances (what) or PATCH /v1/instances/{id}.
// delivery is a webhook receiver (parseDelivery); in an update, null removes the receiver.
func parseInstanceBody(data []byte, update bool) (instanceBody, reply, bool) {
	what := "a ProvisionInstanceRequest"
	if update {
		what = "an UpdateInstanceRequest"
	}
	fields, ferr := readObject(data, what, instanceFields)
	if ferr != nil {
		return instanceBody{}, refused(ferr), false
	}
	if update && len(fields) == 0 {
		return instanceBody{}, fail(provider.CodeInvalidRequest, "the update is empty: send instance_name, delivery or both"), false
	}
	var body instanceBody
	if raw, present := fields["instance_name"]; present {
		name, ok := jsonString(raw)
		if !ok || name == "" || len([]rune(name)) > maxInstanceName {
			return instanceBody{}, failParam(provider.CodeInvalidRequest, "instance_name",
				"instance_name must be a string of 1 to 128 characters: a name to recognise the instance by"), false
		}
		body.name = &name
	}
	if raw, present := fields["delivery"]; present {
		switch {
		case string(raw) == "null" && update:
			body.removeDelivery = true
		case len(raw) > 0 && raw[0] == '{':
			d, rp, ok := parseDelivery(raw)
			if !ok {
				return instanceBody{}, rp, false
			}
			body.delivery = d
		default:
			return instanceBody{}, failParam(provider.CodeInvalidRequest, "delivery", "delivery must be an object (a webhook configuration)"), false
		}
	}
	fp, err := canonicalSHA256(data)
	if err != nil {
		return instanceBody{}, fail(provider.CodeInvalidRequest, "the body cannot be read as canonical JSON: "+err.Error()), false
	}
	body.fingerprint = fp
	return body, reply{}, true
}

// POST /v1/instances.
func (s *Server) handleProvision(c *call) reply {
	key, data, ferr := c.keyedBody()
	if ferr != nil {
		return refused(ferr)
	}
	body, rp, ok := parseInstanceBody(data, false)
	if !ok {
		return rp
	}
	name := ""
	if body.name != nil {
		name = *body.name
	}
	res, replayed, err := s.provision(c.r.Context(), key, name, body.fingerprint, body.delivery, c.delay)
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		return rf.rp
	case errors.Is(err, errAborted):
		return reply{}
	case errors.Is(err, errKeyConflict):
		return fail(provider.CodeIdempotencyConflict, "this Idempotency-Key was already used to provision an instance with other fields: "+
			"a new instance needs a new key")
	case errors.Is(err, errInstanceDeleted):
		return fail(provider.CodeInstanceDeleted, "the instance this Idempotency-Key provisioned has been deleted; it is not created again")
	case err != nil:
		return s.failure(err, "no such instance")
	case replayed:
		return success(http.StatusOK, res)
	}
	return success(http.StatusCreated, res)
}

// instanceID reads the path's instance id; GET and PATCH refuse a malformed one with 400, DELETE (whose
// contract has no 400) with 404.
func instanceID(c *call, malformed int) (string, reply, bool) {
	id := c.r.PathValue("id")
	if isUUID(id) {
		return id, reply{}, true
	}
	if malformed == http.StatusNotFound {
		return "", fail(provider.CodeNotFound, "no instance "+quote(id)+": instance ids are UUIDs"), false
	}
	return "", failParam(provider.CodeInvalidRequest, "id", "instance ids are UUIDs, and "+quote(id)+" is not one"), false
}

// GET /v1/instances/{id}.
func (s *Server) handleGetInstance(c *call) reply {
	id, rp, ok := instanceID(c, http.StatusBadRequest)
	if !ok {
		return rp
	}
	if err := c.delay(); err != nil {
		return reply{}
	}
	inst, err := s.getInstance(id)
	if err != nil {
		return s.failure(err, "no instance "+id)
	}
	return success(http.StatusOK, inst)
}

// PATCH /v1/instances/{id}.
func (s *Server) handleUpdateInstance(c *call) reply {
	id, rp, ok := instanceID(c, http.StatusBadRequest)
	if !ok {
		return rp
	}
	key, data, ferr := c.keyedBody()
	if ferr != nil {
		return refused(ferr)
	}
	body, rp, ok := parseInstanceBody(data, true)
	if !ok {
		return rp
	}
	inst, _, err := s.updateInstance(c.r.Context(), instanceUpdate{id: id, key: key, fingerprint: body.fingerprint, name: body.name,
		delivery: body.delivery, removeDelivery: body.removeDelivery}, c.delay)
	var rf *refusal
	switch {
	case errors.As(err, &rf):
		return rf.rp
	case errors.Is(err, errAborted):
		return reply{}
	case errors.Is(err, errKeyConflict):
		return fail(provider.CodeIdempotencyConflict, "this Idempotency-Key was already used for another update of this instance: "+
			"a new update needs a new key")
	case err != nil:
		return s.failure(err, "no instance "+id)
	}
	return success(http.StatusOK, inst)
}

// DELETE /v1/instances/{id}.
func (s *Server) handleDeleteInstance(c *call) reply {
	id, rp, ok := instanceID(c, http.StatusNotFound)
	if !ok {
		return rp
	}
	if err := c.delay(); err != nil {
		return reply{}
	}
	if err := s.deleteInstance(id); err != nil {
		return s.failure(err, "no instance "+id)
	}
	return reply{status: http.StatusNoContent}
}
