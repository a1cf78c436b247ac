{{/* Names, labels, images and the pod-level settings every component shares. */}}

{{- define "meridian.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "meridian.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "meridian.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: meridian
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: (dict "root" $ "component" "apiserver") */}}
{{- define "meridian.selectorLabels" -}}
app.kubernetes.io/name: {{ include "meridian.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "meridian.componentLabels" -}}
{{ include "meridian.labels" .root }}
{{ include "meridian.selectorLabels" . }}
{{- end -}}

{{/* (dict "root" $ "name" "federation-apiserver") */}}
{{- define "meridian.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{- define "meridian.apiserverService" -}}
{{- printf "%s-apiserver" (include "meridian.fullname" .) -}}
{{- end -}}

{{/* The Secret with tls.crt, tls.key and ca.crt the API server serves with. */}}
{{- define "meridian.servingSecret" -}}
{{- if eq .Values.certificates.mode "existingSecret" -}}
{{- required "certificates.existingSecret is required when certificates.mode is existingSecret" .Values.certificates.existingSecret -}}
{{- else if eq .Values.certificates.mode "certManager" -}}
{{- printf "%s-serving" (include "meridian.fullname" .) -}}
{{- else -}}
{{- printf "%s-pki" (include "meridian.fullname" .) -}}
{{- end -}}
{{- end -}}

{{- define "meridian.tokensSecret" -}}
{{- printf "%s-tokens" (include "meridian.fullname" .) -}}
{{- end -}}

{{/* host[:port] of externalAddress, split. */}}
{{- define "meridian.externalHost" -}}
{{- $a := .Values.apiserver.externalAddress -}}
{{- if regexMatch "^\\[.*\\](:[0-9]+)?$" $a -}}
{{- regexReplaceAll "^\\[(.*)\\](:[0-9]+)?$" $a "${1}" -}}
{{- else if regexMatch "^[^:]+:[0-9]+$" $a -}}
{{- regexReplaceAll ":[0-9]+$" $a "" -}}
{{- else -}}
{{- $a -}}
{{- end -}}
{{- end -}}

{{/* The names and addresses the serving certificate holds, as a JSON list. */}}
{{- define "meridian.sans" -}}
{{- $svc := include "meridian.apiserverService" . -}}
{{- $ns := .Release.Namespace -}}
{{- $sans := list "localhost" "127.0.0.1" $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns .Values.clusterDomain) -}}
{{- with include "meridian.externalHost" . -}}
{{- $sans = append $sans . -}}
{{- end -}}
{{- range .Values.apiserver.extraSANs -}}
{{- $sans = append $sans . -}}
{{- end -}}
{{- $sans | uniq | toJson -}}
{{- end -}}

{{/*
The CA, serving certificate and bearer tokens, computed once per render and kept across
upgrades: what the cluster already holds (lookup) is reused, and only what is missing, expiring
within renewBeforeDays or issued for other names is made anew. `helm template` has no cluster to
look up, so it renders fresh credentials every time.
*/}}
{{- define "meridian.credentials" -}}
{{- if not (hasKey .Values "__meridianCredentials") -}}
{{- $ns := .Release.Namespace -}}
{{- $c := dict -}}
{{- $tokens := lookup "v1" "Secret" $ns (include "meridian.tokensSecret" .) | default dict -}}
{{- $tokData := get $tokens "data" | default dict -}}
{{- range $who := list "admin" "fed-scheduler" "fed-controllers" -}}
{{- $old := get $tokData $who -}}
{{- $_ := set $c (printf "token-%s" $who) (ternary (b64dec $old) (randAlphaNum 64) (not (empty $old))) -}}
{{- end -}}
{{- if eq .Values.certificates.mode "generate" -}}
{{- $pki := lookup "v1" "Secret" $ns (include "meridian.servingSecret" .) | default dict -}}
{{- $data := get $pki "data" | default dict -}}
{{- $ann := (get $pki "metadata" | default dict).annotations | default dict -}}
{{- $ca := dict -}}
{{- if and (get $data "ca.crt") (get $data "ca.key") -}}
{{- $ca = buildCustomCert (get $data "ca.crt") (get $data "ca.key") -}}
{{- else -}}
{{- $ca = genCA "meridian-ca" (int .Values.certificates.caValidityDays) -}}
{{- end -}}
{{- $sans := include "meridian.sans" . | fromJsonArray -}}
{{- $sansKey := join "," $sans -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $notAfter := get $ann "meridian.dev/serving-not-after" | default "0" | int64 -}}
{{- $renewAt := sub $notAfter (mul (int .Values.certificates.renewBeforeDays) 86400) -}}
{{- if and (get $data "tls.crt") (get $data "tls.key") (eq (get $ann "meridian.dev/serving-sans") $sansKey) (lt $now $renewAt) -}}
{{- $_ := set $c "tls.crt" (b64dec (get $data "tls.crt")) -}}
{{- $_ := set $c "tls.key" (b64dec (get $data "tls.key")) -}}
{{- $_ := set $c "notAfter" (toString $notAfter) -}}
{{- else -}}
{{- $ips := list -}}
{{- $dns := list -}}
{{- range $sans -}}
{{- if regexMatch "^[0-9.]+$|:" . -}}
{{- $ips = append $ips . -}}
{{- else -}}
{{- $dns = append $dns . -}}
{{- end -}}
{{- end -}}
{{- $days := int .Values.certificates.servingValidityDays -}}
{{- $cert := genSignedCert (include "meridian.apiserverService" .) $ips $dns $days $ca -}}
{{- $_ := set $c "tls.crt" $cert.Cert -}}
{{- $_ := set $c "tls.key" $cert.Key -}}
{{- $_ := set $c "notAfter" (toString (add $now (mul $days 86400))) -}}
{{- end -}}
{{- $_ := set $c "ca.crt" $ca.Cert -}}
{{- $_ := set $c "ca.key" $ca.Key -}}
{{- $_ := set $c "sans" $sansKey -}}
{{- else -}}
{{/* The CA clients trust, for the admin kubeconfig, once the Secret exists. */}}
{{- $s := lookup "v1" "Secret" $ns (include "meridian.servingSecret" .) | default dict -}}
{{- with (get $s "data" | default dict) -}}
{{- with get . "ca.crt" -}}
{{- $_ := set $c "ca.crt" (b64dec .) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $_ := set .Values "__meridianCredentials" $c -}}
{{- end -}}
{{- toJson (get .Values "__meridianCredentials") -}}
{{- end -}}

{{/* The server URL of the admin kubeconfig: the external address, else in-cluster DNS. */}}
{{- define "meridian.externalURL" -}}
{{- $a := .Values.apiserver.externalAddress -}}
{{- if $a -}}
{{- if regexMatch ":[0-9]+$" $a -}}
{{- printf "https://%s" $a -}}
{{- else -}}
{{- printf "https://%s:%v" $a .Values.apiserver.externalService.port -}}
{{- end -}}
{{- else -}}
{{- printf "https://%s.%s.svc:%v" (include "meridian.apiserverService" .) .Release.Namespace .Values.apiserver.service.port -}}
{{- end -}}
{{- end -}}

{{/* Pod-level settings: (dict "root" $ "c" .Values.<component> "component" "x") */}}
{{- define "meridian.podCommon" -}}
{{- with .root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .root.Values.podSecurityContext | nindent 2 }}
{{- with .c.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .c.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if .c.topologySpread }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "meridian.selectorLabels" . | nindent 8 }}
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "meridian.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end -}}

{{/* A PodDisruptionBudget for a component with more than one replica (one replica: a PDB
would only block node drains). (dict "root" $ "c" .Values.<component> "component" "x") */}}
{{- define "meridian.pdb" -}}
{{- if and .c.pdb.enabled (gt (int .c.replicas) 1) }}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "meridian.fullname" .root }}-{{ .component }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    {{- include "meridian.componentLabels" . | nindent 4 }}
spec:
  maxUnavailable: {{ .c.pdb.maxUnavailable }}
  selector:
    matchLabels:
      {{- include "meridian.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The bundled etcd: StatefulSet and client Service name, and the headless Service of its
members. */}}
{{- define "meridian.etcd" -}}
{{- printf "%s-etcd" (include "meridian.fullname" .) -}}
{{- end -}}

{{- define "meridian.etcdPeersService" -}}
{{- printf "%s-etcd-peers" (include "meridian.fullname" .) -}}
{{- end -}}

{{/* The members' names (the StatefulSet's pod names), as a JSON list. */}}
{{- define "meridian.etcdMembers" -}}
{{- $etcd := include "meridian.etcd" . -}}
{{- $members := list -}}
{{- range $i := until (int .Values.etcd.replicas) -}}
{{- $members = append $members (printf "%s-%d" $etcd $i) -}}
{{- end -}}
{{- $members | toJson -}}
{{- end -}}

{{/* A member's DNS name under the headless Service: (dict "root" $ "member" "x-etcd-0") */}}
{{- define "meridian.etcdMemberHost" -}}
{{- printf "%s.%s.%s.svc.%s" .member (include "meridian.etcdPeersService" .root) .root.Release.Namespace .root.Values.clusterDomain -}}
{{- end -}}

{{/* The URL the API servers reach etcd at: its client Service. */}}
{{- define "meridian.etcdClientURL" -}}
{{- printf "https://%s.%s.svc.%s:2379" (include "meridian.etcd" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{/* The names the etcd server/peer certificate holds, as a JSON list: every member under
the headless Service, the client Service, loopback (etcdctl inside a pod). */}}
{{- define "meridian.etcdSANs" -}}
{{- $root := . -}}
{{- $ns := .Release.Namespace -}}
{{- $etcd := include "meridian.etcd" . -}}
{{- $peers := include "meridian.etcdPeersService" . -}}
{{- $sans := list "localhost" "127.0.0.1" -}}
{{- range $svc := list $etcd $peers -}}
{{- $sans = concat $sans (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.%s" $svc $ns $root.Values.clusterDomain)) -}}
{{- end -}}
{{- range $m := include "meridian.etcdMembers" . | fromJsonArray -}}
{{- $sans = append $sans (include "meridian.etcdMemberHost" (dict "root" $root "member" $m)) -}}
{{- end -}}
{{- $sans | uniq | toJson -}}
{{- end -}}

{{- define "meridian.etcdServerSecret" -}}
{{- printf "%s-etcd-pki" (include "meridian.fullname" .) -}}
{{- end -}}

{{- define "meridian.etcdClientSecret" -}}
{{- printf "%s-etcd-client" (include "meridian.fullname" .) -}}
{{- end -}}

{{/*
The bundled etcd's CA, its server/peer certificate (server and client auth, every member's
name) and the API servers' client certificate, computed once per render and kept across
upgrades as the API server's are: an existing CA is reused; a certificate is issued again
when missing, expiring within etcd.renewBeforeDays, issued for other names, or issued by
another CA.
*/}}
{{- define "meridian.etcdCredentials" -}}
{{- if not (hasKey .Values "__meridianEtcd") -}}
{{- $ns := .Release.Namespace -}}
{{- $e := .Values.etcd -}}
{{- $c := dict -}}
{{- $server := lookup "v1" "Secret" $ns (include "meridian.etcdServerSecret" .) | default dict -}}
{{- $sdata := get $server "data" | default dict -}}
{{- $sann := (get $server "metadata" | default dict).annotations | default dict -}}
{{- $client := lookup "v1" "Secret" $ns (include "meridian.etcdClientSecret" .) | default dict -}}
{{- $cdata := get $client "data" | default dict -}}
{{- $cann := (get $client "metadata" | default dict).annotations | default dict -}}
{{- $ca := dict -}}
{{- if and (get $sdata "ca.crt") (get $sdata "ca.key") -}}
{{- $ca = buildCustomCert (get $sdata "ca.crt") (get $sdata "ca.key") -}}
{{- else -}}
{{- $ca = genCA "meridian-etcd-ca" (int $e.caValidityDays) -}}
{{- end -}}
{{- $now := now | unixEpoch | int64 -}}
{{- $days := int $e.certValidityDays -}}
{{- $renew := mul (int $e.renewBeforeDays) 86400 -}}
{{- $sans := include "meridian.etcdSANs" . | fromJsonArray -}}
{{- $sansKey := join "," $sans -}}
{{- $sameCA := eq (get $sdata "ca.crt" | default "" | b64dec) $ca.Cert -}}
{{- $serverAfter := get $sann "meridian.dev/not-after" | default "0" | int64 -}}
{{- if and $sameCA (get $sdata "tls.crt") (get $sdata "tls.key") (eq (get $sann "meridian.dev/sans") $sansKey) (lt $now (sub $serverAfter $renew)) -}}
{{- $_ := set $c "server.crt" (b64dec (get $sdata "tls.crt")) -}}
{{- $_ := set $c "server.key" (b64dec (get $sdata "tls.key")) -}}
{{- $_ := set $c "serverNotAfter" (toString $serverAfter) -}}
{{- else -}}
{{- $ips := list -}}
{{- $dns := list -}}
{{- range $sans -}}
{{- if regexMatch "^[0-9.]+$|:" . -}}
{{- $ips = append $ips . -}}
{{- else -}}
{{- $dns = append $dns . -}}
{{- end -}}
{{- end -}}
{{- $cert := genSignedCert (include "meridian.etcd" .) $ips $dns $days $ca -}}
{{- $_ := set $c "server.crt" $cert.Cert -}}
{{- $_ := set $c "server.key" $cert.Key -}}
{{- $_ := set $c "serverNotAfter" (toString (add $now (mul $days 86400))) -}}
{{- end -}}
{{- $clientAfter := get $cann "meridian.dev/not-after" | default "0" | int64 -}}
{{- $clientCA := eq (get $cdata "ca.crt" | default "" | b64dec) $ca.Cert -}}
{{- if and $clientCA (get $cdata "tls.crt") (get $cdata "tls.key") (lt $now (sub $clientAfter $renew)) -}}
{{- $_ := set $c "client.crt" (b64dec (get $cdata "tls.crt")) -}}
{{- $_ := set $c "client.key" (b64dec (get $cdata "tls.key")) -}}
{{- $_ := set $c "clientNotAfter" (toString $clientAfter) -}}
{{- else -}}
{{- $cert := genSignedCert (printf "%s-apiserver" (include "meridian.fullname" .)) nil nil $days $ca -}}
{{- $_ := set $c "client.crt" $cert.Cert -}}
{{- $_ := set $c "client.key" $cert.Key -}}
{{- $_ := set $c "clientNotAfter" (toString (add $now (mul $days 86400))) -}}
{{- end -}}
{{- $_ := set $c "ca.crt" $ca.Cert -}}
{{- $_ := set $c "ca.key" $ca.Key -}}
{{- $_ := set $c "sans" $sansKey -}}
{{- $_ := set .Values "__meridianEtcd" $c -}}
{{- end -}}
{{- toJson (get .Values "__meridianEtcd") -}}
{{- end -}}
