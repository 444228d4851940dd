package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kinds of approvals provider a Tool may name in spec.providerRef.
const (
	KindApprovalProvider        = "ApprovalProvider"
	KindClusterApprovalProvider = "ClusterApprovalProvider"
)

// DefaultProviderName is the name of the provider a Tool without spec.providerRef uses: the
// namespace's ApprovalProvider of that name, else the ClusterApprovalProvider of that name, else the
// manager's own provider flags.
const DefaultProviderName = "default"

// ApprovalProviderSpec is where an AAP v1 approvals provider is and how the manager authenticates to it.
// +kubebuilder:validation:XValidation:rule="has(self.credentialSecretRef) != has(self.provisioning)",message="set exactly one of spec.credentialSecretRef (an instance credential someone issued) or spec.provisioning (a provisioner token the manager creates an instance of its own with)"
// +kubebuilder:validation:XValidation:rule="has(self.provisioning) == has(oldSelf.provisioning)",message="spec.provisioning cannot be added or removed: the instance belongs to this object; create another provider object instead"
// +kubebuilder:validation:XValidation:rule="self.url.startsWith('https://') || (self.url.startsWith('http://') && has(self.allowInsecureHTTP) && self.allowInsecureHTTP)",message="spec.url must be an https:// URL; an http:// URL is accepted only with spec.allowInsecureHTTP: true, for a development provider"
// +kubebuilder:validation:XValidation:rule="!(has(self.caBundle) && has(self.caBundleRef))",message="set at most one of spec.caBundle or spec.caBundleRef"
// +kubebuilder:validation:XValidation:rule="!has(self.delivery) || has(self.provisioning)",message="spec.delivery needs spec.provisioning: AAP configures delivery on an instance through the provisioner, so the manager must provision the instance itself"
type ApprovalProviderSpec struct {
	// url is the provider's AAP v1 base URL, which may carry a path, such as
	// https://approvals.example.com/api/aap. It must be https:// unless allowInsecureHTTP is true.
	// +kubebuilder:validation:MinLength=8
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https?://[^/?#@]+(/[^?#]*)?$')",message="spec.url must be an absolute http(s) URL without user information, query or fragment, such as https://approvals.example.com/api/aap"
	// +required
	URL string `json:"url"`

	// allowInsecureHTTP accepts an http:// url. Requests, arguments and the credential then cross the
	// network in the clear: only for a development provider inside the cluster.
	// +optional
	AllowInsecureHTTP bool `json:"allowInsecureHTTP,omitempty"`

	// caBundle is a PEM bundle of the CAs to trust for the provider instead of the system pool.
	// +optional
	CABundle []byte `json:"caBundle,omitempty"`

	// caBundleRef is a Secret or ConfigMap key holding that PEM bundle instead of caBundle. It is read
	// in the provider's namespace (for a ClusterApprovalProvider, the manager's cluster resource
	// namespace).
	// +optional
	CABundleRef *CABundleRef `json:"caBundleRef,omitempty"`

	// credentialSecretRef is the key of a Secret holding the instance credential: the bearer token the
	// provider issued for the AAP instance this provider object stands for. A rotated Secret takes
	// effect without a restart.
	// +optional
	CredentialSecretRef *SecretKeyRef `json:"credentialSecretRef,omitempty"`

	// provisioning has the manager create an AAP instance of its own with a provisioner token, keep the
	// issued credential in a Secret it owns, and delete the instance (which cancels its pending
	// requests at the provider) when this object is deleted. It cannot be changed: the provisioner
	// token's Secret may be rotated in place.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.provisioning is immutable: the instance belongs to this object; create another provider object instead"
	// +optional
	Provisioning *Provisioning `json:"provisioning,omitempty"`

	// delivery turns on AAP's asynchronous mode for this provider: the provider notifies the
	// manager's webhook receiver when a request is decided, and a waiting call holds no long poll.
	// Absent: synchronous mode, in which the manager long-polls each waiting request.
	// +optional
	Delivery *Delivery `json:"delivery,omitempty"`
}

// DeliveryWebhook is the one delivery type of AAP v1.
const DeliveryWebhook = "webhook"

// Delivery is how the provider reaches the manager's webhook receiver.
type Delivery struct {
	// type is the delivery type: webhook.
	// +kubebuilder:validation:Enum=webhook
	// +kubebuilder:default=webhook
	// +optional
	Type string `json:"type,omitempty"`
	// receiverURL is the HTTPS URL at which the provider reaches the manager's receiver, such as
	// https://toolgate.example.com/aap/events (an Ingress or Gateway route to the manager's receiver
	// Service). Changing it registers the new URL with a new registration id and secret.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^https://[^/?#@]+([/?][^#]*)?$')",message="spec.delivery.receiverURL must be an https:// URL without user information or fragment, such as https://toolgate.example.com/aap/events"
	// +required
	ReceiverURL string `json:"receiverURL"`
	// rotation is any value; changing it replaces the signing secret (with a new registration id),
	// as AAP replaces a delivery configuration.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Rotation string `json:"rotation,omitempty"`
}

// SecretKeyRef names a key of a Secret in the provider's namespace (for a ClusterApprovalProvider, the
// manager's cluster resource namespace).
type SecretKeyRef struct {
	// name is the Secret's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// key is the key in the Secret's data.
	// +kubebuilder:default=token
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// Provisioning is how the manager creates its own AAP instance.
type Provisioning struct {
	// provisionerTokenSecretRef is the key of a Secret holding the provisioner token, which may create
	// and delete instances but not make approval requests.
	// +required
	ProvisionerTokenSecretRef SecretKeyRef `json:"provisionerTokenSecretRef"`
	// instanceName is the instance's name at the provider, which approvers see. Default: the provider
	// object's namespace and name.
	// +kubebuilder:validation:MaxLength=200
	// +optional
	InstanceName string `json:"instanceName,omitempty"`
}

// ProviderInstance is the AAP instance the manager created (spec.provisioning).
type ProviderInstance struct {
	// id is the instance's id at the provider.
	ID string `json:"id"`
	// name is the instance's name at the provider.
	// +optional
	Name string `json:"name,omitempty"`
	// credentialSecretName is the Secret, owned by the provider object, that holds the issued
	// credential under the key "token".
	CredentialSecretName string `json:"credentialSecretName"`
	// replaces is the id of the instance this one replaced when that one's credential neared its
	// expiry; empty for the object's first instance.
	// +optional
	Replaces string `json:"replaces,omitempty"`
	// credentialIssuedAt is when the manager received the credential.
	// +optional
	CredentialIssuedAt *metav1.Time `json:"credentialIssuedAt,omitempty"`
	// credentialExpiresAt is when the issued credential expires, if the provider said. The manager
	// replaces such a credential with a new instance once two thirds of its lifetime have passed.
	// +optional
	CredentialExpiresAt *metav1.Time `json:"credentialExpiresAt,omitempty"`
}

// CABundleRef names the key of a Secret or ConfigMap that holds a PEM CA bundle.
type CABundleRef struct {
	// kind is Secret or ConfigMap.
	// +kubebuilder:validation:Enum=Secret;ConfigMap
	// +required
	Kind string `json:"kind"`
	// name is the object's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// key is the key in its data.
	// +kubebuilder:default=ca.crt
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Key string `json:"key,omitempty"`
}

// ApprovalProviderStatus is what the manager last found out about the provider.
type ApprovalProviderStatus struct {
	// observedGeneration is the generation the conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Ready is True when an authenticated read at the provider succeeded with this
	// generation's settings; its reason and message say what is wrong otherwise. kstatus's
	// Reconciling is True while the manager retries a provider it could not read, and Stalled on a
	// settings error only a change fixes (a missing Secret, a refused credential). Delivery: the
	// webhook registration of spec.delivery.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// instance is the AAP instance the manager created (spec.provisioning), which new calls use.
	// +optional
	Instance *ProviderInstance `json:"instance,omitempty"`
	// replacedInstances are earlier instances whose expiring credential was replaced by a new
	// instance. Each is kept, with its Secret, while calls submitted to it have not ended, and deleted
	// at the provider once they have, or once its credential expired.
	// +listType=atomic
	// +optional
	ReplacedInstances []ProviderInstance `json:"replacedInstances,omitempty"`
	// delivery is the webhook registration of the instance (spec.delivery): the one the provider
	// delivers to, and one being registered.
	// +optional
	Delivery *DeliveryStatus `json:"delivery,omitempty"`
}

// DeliveryStatus is what the manager registered for asynchronous mode.
type DeliveryStatus struct {
	// active is the registration the provider committed: notifications for the instance are signed
	// with its secret.
	// +optional
	Active *WebhookRegistration `json:"active,omitempty"`
	// proposed is a registration the manager is submitting to the provider; the receiver answers its
	// verification message.
	// +optional
	Proposed *WebhookRegistration `json:"proposed,omitempty"`
	// previous is the registration the active one replaced: notifications already in flight signed
	// with its secret are still accepted for a while after the replacement.
	// +optional
	Previous *WebhookRegistration `json:"previous,omitempty"`
}

// WebhookRegistration is one delivery configuration: a receiver URL, a registration id and a signing
// secret in a Secret the provider object owns.
type WebhookRegistration struct {
	// registrationID is the id the provider echoes in its verification message.
	RegistrationID string `json:"registrationID"`
	// receiverURL is the URL registered.
	ReceiverURL string `json:"receiverURL"`
	// rotation is spec.delivery.rotation when the registration was made.
	// +optional
	Rotation string `json:"rotation,omitempty"`
	// secretName is the Secret holding the signing secret under the key "signingSecret".
	SecretName string `json:"secretName"`
	// instanceID is the instance the registration is for, once known.
	// +optional
	InstanceID string `json:"instanceID,omitempty"`
	// since is when the registration became active (or was proposed).
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// ApprovalProvider is an AAP v1 approvals provider for the Tools of its namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=aprov,categories=toolgate
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.status.instance.id`,priority=1
type ApprovalProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApprovalProviderSpec `json:"spec"`
	// An object the manager has not checked yet reads with status.observedGeneration 0, older than
	// its generation: kstatus reports it InProgress from its creation, not Current.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status ApprovalProviderStatus `json:"status,omitempty"`
}

// ApprovalProviderList is a list of ApprovalProviders.
// +kubebuilder:object:root=true
type ApprovalProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalProvider `json:"items"`
}

// ClusterApprovalProvider is an AAP v1 approvals provider any namespace's Tools may use. The Secrets
// and ConfigMaps it names are read in the manager's cluster resource namespace.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=caprov,categories=toolgate
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Instance",type=string,JSONPath=`.status.instance.id`,priority=1
type ClusterApprovalProvider struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec ApprovalProviderSpec `json:"spec"`
	// An object the manager has not checked yet reads with status.observedGeneration 0, older than
	// its generation: kstatus reports it InProgress from its creation, not Current.
	// +kubebuilder:default={observedGeneration: 0}
	// +optional
	Status ApprovalProviderStatus `json:"status,omitempty"`
}

// ClusterApprovalProviderList is a list of ClusterApprovalProviders.
// +kubebuilder:object:root=true
type ClusterApprovalProviderList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterApprovalProvider `json:"items"`
}

// ProviderRef names the approvals provider a Tool's calls use.
type ProviderRef struct {
	// kind is ApprovalProvider (in the Tool's namespace) or ClusterApprovalProvider.
	// +kubebuilder:validation:Enum=ApprovalProvider;ClusterApprovalProvider
	// +required
	Kind string `json:"kind"`
	// name is the provider object's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
}

// GenericProvider is an ApprovalProvider or a ClusterApprovalProvider.
// +kubebuilder:object:generate=false
type GenericProvider interface {
	client.Object
	GetSpec() *ApprovalProviderSpec
	GetStatus() *ApprovalProviderStatus
}

func (p *ApprovalProvider) GetSpec() *ApprovalProviderSpec            { return &p.Spec }
func (p *ApprovalProvider) GetStatus() *ApprovalProviderStatus        { return &p.Status }
func (p *ClusterApprovalProvider) GetSpec() *ApprovalProviderSpec     { return &p.Spec }
func (p *ClusterApprovalProvider) GetStatus() *ApprovalProviderStatus { return &p.Status }

func init() {
	SchemeBuilder.Register(&ApprovalProvider{}, &ApprovalProviderList{}, &ClusterApprovalProvider{}, &ClusterApprovalProviderList{})
}
