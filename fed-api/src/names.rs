//! Well-known labels, annotations and finalizers shared by Meridian's components.

/// Marks objects Meridian pushed into a member cluster.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`] on objects Meridian manages.
pub const MANAGED_BY_VALUE: &str = "meridian";
/// The uid of the federated object a member-cluster object belongs to.
pub const OWNER_UID_LABEL: &str = "federation.meridian.dev/owner-uid";
/// Federation v1's replica preferences annotation, honoured with v1 semantics.
pub const REPLICA_SET_PREFERENCES_ANNOTATION: &str =
    "federation.kubernetes.io/replica-set-preferences";
/// Finalizer that holds a federated workload until member objects are removed.
pub const WORKLOAD_FINALIZER: &str = "federation.meridian.dev/member-cleanup";
/// Namespace Meridian uses in member clusters and the federation for its own objects.
pub const SYSTEM_NAMESPACE: &str = "meridian-system";

/// The lb-agent's Service in each member's [`SYSTEM_NAMESPACE`]; its
/// `status.loadBalancer.ingress[0].ip` is the lb-agent's address and its ports named
/// `http`, `dns` and `peer` are where the lb-agent answers at that address.
pub const LB_AGENT_SERVICE: &str = "meridian-lb-agent";
/// ConfigMap in each member's [`SYSTEM_NAMESPACE`] the service controller writes for
/// that member's lb-agent (key [`LB_AGENT_CONFIG_KEY`], a [`crate::lbconfig::LbConfig`]).
pub const LB_AGENT_CONFIGMAP: &str = "meridian-lb-agent-config";
/// Key of the lb-agent configuration JSON in [`LB_AGENT_CONFIGMAP`].
pub const LB_AGENT_CONFIG_KEY: &str = "config.json";
/// `endpointslice.kubernetes.io/managed-by` value on the EndpointSlices Meridian writes
/// into members (remote lb-agents); lb-agents ignore these when collecting local endpoints.
pub const ENDPOINTSLICE_MANAGER: &str = "service-controller.meridian.dev";
/// Name suffix of Meridian's EndpointSlice for a Service: `<service>-meridian`.
pub const ENDPOINTSLICE_SUFFIX: &str = "-meridian";
/// HTTP header an lb-agent sets when it forwards a request to another cluster's lb-agent;
/// a request carrying it is served by local endpoints only (loop prevention).
pub const FORWARDED_BY_HEADER: &str = "x-meridian-forwarded-by";
/// Federation ConfigMap (in [`SYSTEM_NAMESPACE`]) holding the lb-agent listen port
/// allocated to each federated Service port: key `<namespace>.<service>.<port>`, value the port.
pub const LB_PORTS_CONFIGMAP: &str = "meridian-lb-ports";
/// Federation ConfigMap (in [`SYSTEM_NAMESPACE`]) holding the dedicated address each
/// opted-in federated Service has in each cluster: key `<namespace>.<service>.<cluster>`,
/// value the IPv4 address.
pub const LB_ADDRESSES_CONFIGMAP: &str = "meridian-lb-addresses";
/// Annotation on a federated Service: `"true"` gives it its own address in every cluster
/// whose lb-agent has an address pool, where the lb-agent serves the Service's own ports.
pub const DEDICATED_ADDRESS_ANNOTATION: &str = "federation.meridian.dev/dedicated-address";
/// Annotation on a member's [`LB_AGENT_SERVICE`]: the addresses its lb-agent can serve
/// dedicated Service addresses on (IPv4 addresses and CIDRs, comma-separated); they must
/// reach the lb-agent's host.
pub const LB_ADDRESS_POOL_ANNOTATION: &str = "federation.meridian.dev/address-pool";
/// Federation ConfigMap (in [`SYSTEM_NAMESPACE`]) mapping client networks to where they
/// are: each entry `<any name>: "<cidr> <region> [<zone>]"`. Filled into every lb-agent's
/// configuration, for nearest-first and `geo` DNS answers.
pub const CLIENT_SUBNETS_CONFIGMAP: &str = "meridian-client-subnets";
/// Annotation on a federated Service choosing its traffic policy: `nearest` (default),
/// `failover`, `weighted` or `geo`.
pub const TRAFFIC_POLICY_ANNOTATION: &str = "federation.meridian.dev/traffic-policy";
/// Annotation with the `failover` order: cluster, region or zone names, comma-separated,
/// most preferred first.
pub const FAILOVER_ORDER_ANNOTATION: &str = "federation.meridian.dev/failover-order";
/// Annotation with the `weighted` shares: `<cluster>=<weight>`, comma-separated.
pub const WEIGHTS_ANNOTATION: &str = "federation.meridian.dev/weights";
/// Annotation on a federated Service naming a `kubernetes.io/tls` Secret (in its namespace
/// in each member) whose certificate the lb-agents terminate TLS with for the Service's
/// names, for clients that need HTTP routing of HTTPS.
pub const TLS_SECRET_ANNOTATION: &str = "federation.meridian.dev/tls-secret";

/// The user fed-scheduler authenticates as in the federation (bound to the ClusterRole of
/// the same name, which holds exactly what it reads and writes), as kube-scheduler is
/// `system:kube-scheduler`.
pub const SCHEDULER_USER: &str = "system:meridian:fed-scheduler";
/// The user fed-controllers authenticates as in the federation (bound to the ClusterRole
/// of the same name).
pub const CONTROLLERS_USER: &str = "system:meridian:fed-controllers";
