{{- define "hermes.fullname" -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "hermes.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* Pods of one component: call with (list $ "gateway"). */}}
{{- define "hermes.selector" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ $root.Chart.Name }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "hermes.secretName" -}}
{{- if .Values.existingSecret -}}{{ .Values.existingSecret }}{{- else -}}{{ include "hermes.fullname" . }}{{- end -}}
{{- end -}}

{{- define "hermes.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/* A generated password that upgrades keep: (list $ "<secret name>" "<key>"). */}}
{{- define "hermes.generatedPassword" -}}
{{- $root := index . 0 -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (index . 1) -}}
{{- $data := dict -}}
{{- if $existing -}}{{- $data = $existing.data | default dict -}}{{- end -}}
{{- index $data (index . 2) | default (randAlphaNum 32 | b64enc) -}}
{{- end -}}

{{/* The environment every hermes-gateway process gets: data dir, store, bus, settings;
     (list $ <more settings>), the second over .Values.env. */}}
{{- define "hermes.env" -}}
{{- $root := index . 0 -}}
{{- $settings := merge (deepCopy (index . 1)) $root.Values.env -}}
{{- with $root -}}
- name: HERMES_DATA_DIR
  value: /data
{{- if .Values.valkey.enabled }}
- name: VALKEY_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "hermes.fullname" . }}-valkey
      key: password
- name: REDIS_URL
  value: "redis://:$(VALKEY_PASSWORD)@{{ include "hermes.fullname" . }}-valkey:6379/0"
{{- else if or .Values.externalRedis.url .Values.externalRedis.existingSecret }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.externalRedis.existingSecret | default (printf "%s-redis" (include "hermes.fullname" .)) }}
      key: {{ if .Values.externalRedis.existingSecret }}{{ .Values.externalRedis.existingSecretKey }}{{ else }}REDIS_URL{{ end }}
{{- end }}
{{- if .Values.hub.enabled }}
- name: HERMES_HUB
  value: "true"
{{- if .Values.nats.enabled }}
- name: NATS_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ include "hermes.fullname" . }}-nats
      key: token
- name: NATS_URL
  value: "nats://$(NATS_TOKEN)@{{ include "hermes.fullname" . }}-nats:4222"
{{- else }}
- name: NATS_URL
  value: {{ .Values.externalNats.url | quote }}
{{- end }}
{{- end }}
{{- range $key, $value := $settings }}
- name: {{ $key }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}
{{- end -}}

{{- define "hermes.envFrom" -}}
{{- if or .Values.existingSecret .Values.secrets }}
- secretRef:
    name: {{ include "hermes.secretName" . }}
{{- end }}
{{- end -}}

{{- define "hermes.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Refuse, at render time, values that would install something broken. */}}
{{- define "hermes.validate" -}}
{{- $v := .Values -}}
{{- if not $v.image.repository -}}
{{- fail "image.repository is not set: build the image from the repository's Dockerfile, push it to a registry of yours and set image.repository (helm/hermes-gateway/README.md says how)" -}}
{{- end -}}
{{- range $name := list "REDIS_URL" "NATS_URL" -}}
{{- if or (hasKey $v.secrets $name) (hasKey $v.env $name) -}}
{{- fail (printf "%s is set by the chart: use %s instead of secrets/env" $name (ternary "externalRedis.url (with valkey.enabled=false)" "externalNats.url (with nats.enabled=false)" (eq $name "REDIS_URL"))) -}}
{{- end -}}
{{- end -}}
{{- $external := or $v.externalRedis.url $v.externalRedis.existingSecret -}}
{{- if and $v.valkey.enabled $external -}}
{{- fail "valkey.enabled and externalRedis both name the store: set valkey.enabled=false to use externalRedis" -}}
{{- end -}}
{{- $several := or (gt (int $v.replicaCount) 1) $v.autoscaling.enabled -}}
{{- if and $several (not $v.valkey.enabled) (not $external) -}}
{{- fail "several gateway replicas but no shared store: each pod would run its own embedded Valkey and the replicas would share nothing (split conversations, no shared locks). Set valkey.enabled=true, or externalRedis.url / externalRedis.existingSecret, or replicaCount=1" -}}
{{- end -}}
{{- if and $several $v.persistence.enabled (ne $v.persistence.accessMode "ReadWriteMany") -}}
{{- fail "persistence.accessMode must be ReadWriteMany with several gateway replicas (one volume for every pod's HERMES_DATA_DIR); or set replicaCount=1" -}}
{{- end -}}
{{- if and $v.autoscaling.enabled (gt (int $v.autoscaling.minReplicas) (int $v.autoscaling.maxReplicas)) -}}
{{- fail "autoscaling.minReplicas is above autoscaling.maxReplicas" -}}
{{- end -}}
{{- if $v.hub.enabled -}}
{{- if and $v.nats.enabled $v.externalNats.url -}}
{{- fail "nats.enabled and externalNats.url both name the hub's bus: set nats.enabled=false to use externalNats.url" -}}
{{- end -}}
{{- if and (not $v.nats.enabled) (not $v.externalNats.url) -}}
{{- fail "hub.enabled needs one NATS server that every pod reaches: set nats.enabled=true (a bundled NATS with JetStream) or externalNats.url" -}}
{{- end -}}
{{- end -}}
{{- if and $v.hub.agents (not $v.hub.enabled) -}}
{{- fail "hub.agents run on the hub: set hub.enabled=true" -}}
{{- end -}}
{{- $ids := dict -}}
{{- range $i, $agent := $v.hub.agents -}}
{{- if not $agent.id -}}
{{- fail (printf "hub.agents[%d] has no id" $i) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" $agent.id) -}}
{{- fail (printf "hub.agents[%d].id %q: use lower-case letters, digits and '-' (it names a Deployment)" $i $agent.id) -}}
{{- end -}}
{{- if hasKey $ids $agent.id -}}
{{- fail (printf "hub.agents: the id %q is used twice (copies of one agent: set its replicas)" $agent.id) -}}
{{- end -}}
{{- $_ := set $ids $agent.id true -}}
{{- if not $agent.capabilities -}}
{{- fail (printf "hub.agents[%d] (%s) has no capabilities" $i $agent.id) -}}
{{- end -}}
{{- end -}}
{{- if and $v.metrics.serviceMonitor.enabled (not (and $v.metrics.serviceMonitor.bearerTokenSecret.name $v.metrics.serviceMonitor.bearerTokenSecret.key)) -}}
{{- fail "metrics.serviceMonitor.enabled: /metrics needs a bearer token; set metrics.serviceMonitor.bearerTokenSecret.name and .key to a Secret key holding one of HERMES_API_KEYS" -}}
{{- end -}}
{{- end -}}

{{/* Where the chart's hermes-gateway pods may run (every Deployment's pod spec). */}}
{{- define "hermes.scheduling" -}}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
