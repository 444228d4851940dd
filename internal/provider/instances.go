package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
)

// Instance operations: a client whose credential is a provisioner token creates and deletes the AAP
// instances that approval requests belong to.
const (
	opProvision      = "provision"
	opUpdateInstance = "update_instance"
	opDeleteInstance = "delete_instance"
)

// ProvisionInstance creates an instance (POST /v1/instances) under key, its Idempotency-Key: a
// repeat with the same key and body answers the same instance and credential, so a caller that lost
// the answer asks again with the same key and loses nothing. A key whose instance was deleted is
// refused with CodeInstanceDeleted.
func (c *HTTPClient) ProvisionInstance(ctx context.Context, key string, in ProvisionInstanceRequest) (*ProvisionInstanceResponse, error) {
	if strings.TrimSpace(key) == "" {
		return nil, &Error{Op: opProvision, Code: CodeInvalidRequest, Detail: "an Idempotency-Key is required"}
	}
	body, err := json.Marshal(in)
	if err != nil {
		return nil, &Error{Op: opProvision, Code: CodeInvalidRequest, Err: err}
	}
	cl := &call{op: opProvision, method: http.MethodPost, path: "/v1/instances", body: body,
		header: http.Header{HeaderIdempotencyKey: {key}}}
	data, status, err := c.doRaw(ctx, cl)
	if err != nil {
		return nil, err
	}
	var out ProvisionInstanceResponse
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, &Error{Op: opProvision, StatusCode: status, Code: CodeMalformed, Detail: boundText(redact(err.Error(), c.credential()))}
	}
	if out.Instance.ID == "" || strings.TrimSpace(out.Credential.Token) == "" {
		return nil, &Error{Op: opProvision, StatusCode: status, Code: CodeMalformed, Detail: "the answer has no instance id or no credential token"}
	}
	return &out, nil
}

// DeliveryUpdate is the delivery part of PATCH /v1/instances/{id}: a complete new configuration, or,
// with Remove, none (JSON null).
type DeliveryUpdate struct {
	Set    *WebhookDeliveryInput
	Remove bool
}

// UpdateInstanceDelivery replaces (or removes) the delivery configuration of instance id (PATCH
// /v1/instances/{id}) under key, its Idempotency-Key: a repeat with the same key and body answers
// the original result without verifying the receiver again. A replacement the receiver did not
// verify is refused with CodeWebhookVerificationFailed and changes nothing.
func (c *HTTPClient) UpdateInstanceDelivery(ctx context.Context, id, key string, d DeliveryUpdate) (*Instance, error) {
	if id == "" || strings.TrimSpace(key) == "" || (d.Set == nil) == !d.Remove {
		return nil, &Error{Op: opUpdateInstance, Code: CodeInvalidRequest, Detail: "an instance id, an Idempotency-Key and either a delivery or its removal are required"}
	}
	body := []byte(`{"delivery":null}`)
	if d.Set != nil {
		var err error
		if body, err = json.Marshal(map[string]*WebhookDeliveryInput{"delivery": d.Set}); err != nil {
			return nil, &Error{Op: opUpdateInstance, Code: CodeInvalidRequest, Err: err}
		}
	}
	cl := &call{op: opUpdateInstance, method: http.MethodPatch, path: "/v1/instances/" + url.PathEscape(id), body: body,
		header: http.Header{HeaderIdempotencyKey: {key}}}
	data, status, err := c.doRaw(ctx, cl)
	if err != nil {
		return nil, err
	}
	var out Instance
	if err := json.Unmarshal(data, &out); err != nil || out.ID != id {
		return nil, &Error{Op: opUpdateInstance, StatusCode: status, Code: CodeMalformed, Detail: "the answer is not the instance that was updated"}
	}
	return &out, nil
}

// DeleteInstance deletes an instance (DELETE /v1/instances/{id}): the provider revokes its
// credentials and cancels its pending requests. An instance the provider no longer knows (404) is
// deleted already.
func (c *HTTPClient) DeleteInstance(ctx context.Context, id string) error {
	if id == "" {
		return &Error{Op: opDeleteInstance, Code: CodeInvalidRequest, Detail: "the instance id is empty"}
	}
	cl := &call{op: opDeleteInstance, method: http.MethodDelete, path: "/v1/instances/" + url.PathEscape(id), noContent: true}
	if _, _, err := c.doRaw(ctx, cl); err != nil && CodeOf(err) != CodeNotFound {
		return err
	}
	return nil
}

// doRaw is do for the instance operations: the same retries, and the successful answer's body as it
// came, for the caller to decode.
func (c *HTTPClient) doRaw(ctx context.Context, cl *call) ([]byte, int, error) {
	var st retryState
	for {
		if ctx.Err() != nil && st.last != nil {
			return nil, 0, st.last
		}
		c.attempted(cl)
		cred := c.credential()
		hreq, cancel, err := c.newRequest(ctx, cl, cred)
		if err == nil {
			var resp *http.Response
			resp, err = c.rt.RoundTrip(hreq)
			var data []byte
			var status int
			data, status, err = c.body(cl, hreq, resp, err, cred)
			cancel()
			if err == nil {
				return data, status, nil
			}
		}
		delay, pe := c.failed(ctx, cl, err, cred, &st)
		if pe != nil {
			return nil, 0, pe
		}
		if !sleepCtx(ctx, delay) {
			return nil, 0, st.last
		}
	}
}
