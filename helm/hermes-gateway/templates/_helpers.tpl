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

{{/* A generated secret (32 letters and digits) that upgrades keep, read back from the
     Secret that holds it: (list $ "<secret name>" "<key>"), in plain text. Call it once
     per value and render: templates/secret.yaml renders every Secret that holds one. */}}
{{- define "hermes.kept" -}}
{{- $root := index . 0 -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (index . 1) -}}
{{- $data := dict -}}
{{- if $existing -}}{{- $data = $existing.data | default dict -}}{{- end -}}
{{- $kept := index $data (index . 2) | default "" -}}
{{- if $kept -}}{{ b64dec $kept }}{{- else -}}{{ randAlphaNum 32 }}{{- end -}}
{{- end -}}

{{/* "true" when a setting's value turns a boolean setting on, as the settings read it. */}}
{{- define "hermes.on" -}}
{{- if has (lower (toString .)) (list "1" "true" "yes" "on" "t" "y") -}}true{{- end -}}
{{- end -}}

{{/* The bundled Valkey's architecture: standalone, replication or cluster. */}}
{{- define "hermes.valkeyArchitecture" -}}
{{- .Values.valkey.architecture | default "standalone" -}}
{{- end -}}

{{/* The bundled Valkey's servers by their own names (<pod>.<headless service>), with a
     port: (list $ <port>). */}}
{{- define "hermes.valkeyNodes" -}}
{{- $root := index . 0 -}}
{{- $port := index . 1 -}}
{{- $name := printf "%s-valkey" (include "hermes.fullname" $root) -}}
{{- $nodes := list -}}
{{- range $i := until (int (include "hermes.valkeyServers" $root)) -}}
{{- $nodes = append $nodes (printf "%s-%d.%s:%v" $name $i $name $port) -}}
{{- end -}}
{{- join "," $nodes -}}
{{- end -}}

{{/* The bundled Valkey's servers, one per node where possible (required: never two on
     one node): their pod spec's affinity. */}}
{{- define "hermes.valkeyAffinity" -}}
affinity:
  podAntiAffinity:
    {{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "hermes.selector" (list . "valkey") | fromYaml)) }}
    {{- if eq .Values.valkey.antiAffinity "required" }}
    requiredDuringSchedulingIgnoredDuringExecution:
      - {{- toYaml $term | nindent 8 }}
    {{- else }}
    preferredDuringSchedulingIgnoredDuringExecution:
      - weight: 100
        podAffinityTerm:
          {{- toYaml $term | nindent 10 }}
    {{- end }}
{{- end -}}

{{/* How many servers the bundled Valkey runs in its replicated or cluster form. */}}
{{- define "hermes.valkeyServers" -}}
{{- if eq (include "hermes.valkeyArchitecture" .) "cluster" -}}
{{- mul (int .Values.valkey.cluster.primaries) (add1 (int .Values.valkey.cluster.replicasPerPrimary)) -}}
{{- else -}}
{{- int .Values.valkey.replicas -}}
{{- end -}}
{{- end -}}

{{- define "hermes.externalStore" -}}
{{- with .Values.externalRedis }}{{ if or .url .existingSecret .clusterNodes .sentinels }}true{{ end }}{{ end -}}
{{- end -}}

{{/* The chart's hermes-gateway workloads and what each one needs, as JSON {"items": [...]}:
     name (its Deployment, or the schemas Job), component, user (its identity on the hub:
     "hub" for the gateway and the hub's services, the agent's id, "schema-admin"), store
     (reaches the store), model (gets the model's keys of the gateway's Secret:
     hub.sharedSecretKeys), settingsSecret (a Secret mounted whole: the gateway's own, an
     agent's existingSecret), natsCreds (the Secret whose key nats.creds is its NATS
     credentials: the issuer Job's <name>-nats-creds with the bundled NATS, else one of
     yours), bridgeCreds (the gateway's and the hub's: the Secret of the bridges' identity,
     `bridge`, whose key nats.creds it mounts as bridge.creds: <name>-bridge-nats-creds with
     the bundled NATS, else externalNats.credsSecrets.bridge), a2aSecret (the gateway's and
     the hub's: hub.a2aAgentsSecret, whose key HUB_A2A_AGENTS it mounts), internet (egress outside the
     cluster), env (its own settings), chartCreds (the chart renders <name>-creds for it),
     chartDir / settingsDir (the directories of HERMES_SECRETS_DIR it mounts). */}}
{{- define "hermes.workloads" -}}
{{- include "hermes.validate" . -}}
{{- $v := .Values -}}
{{- $full := include "hermes.fullname" . -}}
{{- $store := not (empty (or $v.valkey.enabled (include "hermes.externalStore" .))) -}}
{{- $own := ternary (include "hermes.secretName" .) "" (not (empty (or $v.existingSecret $v.secrets))) -}}
{{- $creds := $v.externalNats.credsSecrets | default dict -}}
{{- $internet := $v.networkPolicy.egress.internet -}}
{{- $items := list (dict "name" $full "component" "gateway" "user" "hub" "store" $store
      "model" false "settingsSecret" $own "natsCreds" ($creds.gateway | default "")
      "internet" $internet "env" dict) -}}
{{- if $v.hub.enabled -}}
{{- $env := merge (deepCopy ($v.hub.env | default dict)) $v.env -}}
{{- $rag := not (empty (or (include "hermes.on" (get $env "HUB_RAG"))
      (not (has (trim (toString (get $env "HUB_KNOWLEDGE_BASES"))) (list "" "{}"))))) -}}
{{- $tools := not (has (trim (toString (get $env "HUB_TOOLS"))) (list "" "[]")) -}}
{{/* Remote A2A agents (HUB_A2A_AGENTS): the hub's bridges call them too. */}}
{{- $a2a := or (not (has (trim (toString (get $env "HUB_A2A_AGENTS"))) (list "" "[]")))
      (not (empty $v.hub.a2aAgentsSecret)) -}}
{{- $items = append $items (dict "name" (printf "%s-hub" $full) "component" "hub" "user" "hub"
      "store" (and $store $rag) "model" $rag "settingsSecret" ""
      "natsCreds" ($creds.hub | default "") "internet" (and $internet (or $rag $tools $a2a))
      "env" ($v.hub.env | default dict)) -}}
{{- range $agent := $v.hub.agents -}}
{{- $items = append $items (dict "name" (printf "%s-agent-%s" $full $agent.id)
      "component" (printf "agent-%s" $agent.id) "user" $agent.id
      "store" false "model" (empty $agent.existingSecret)
      "settingsSecret" ($agent.existingSecret | default "")
      "natsCreds" ($agent.natsCredsSecret | default "") "internet" $internet
      "env" ($agent.env | default dict)) -}}
{{- end -}}
{{/* The Job that publishes the built-in HMP schemas, as the schema admin. */}}
{{- if or $v.nats.enabled $creds.schemaAdmin -}}
{{- $items = append $items (dict "name" (printf "%s-schemas" $full) "component" "schemas"
      "user" "schema-admin" "store" false "model" false "settingsSecret" ""
      "natsCreds" ($creds.schemaAdmin | default "") "internet" false "env" dict) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $w := $items -}}
{{- $_ := set $w "bridgeCreds" "" -}}
{{- $_ := set $w "a2aSecret" "" -}}
{{- if and $v.hub.enabled (eq $w.user "hub") -}}
{{- $_ := set $w "bridgeCreds" ($creds.bridge | default "") -}}
{{- $_ := set $w "a2aSecret" ($v.hub.a2aAgentsSecret | default "") -}}
{{- end -}}
{{- if and $v.hub.enabled $v.nats.enabled -}}
{{- $_ := set $w "natsCreds" (printf "%s-nats-creds" $w.name) -}}
{{- if eq $w.user "hub" -}}
{{- $_ := set $w "bridgeCreds" (printf "%s-bridge-nats-creds" $w.name) -}}
{{- end -}}
{{- end -}}
{{- $chartCreds := or (and $w.store (or $v.valkey.enabled $v.externalRedis.url)) (and $v.hub.enabled (not $v.nats.enabled)) -}}
{{- $model := and $w.model $own (not (empty $v.hub.sharedSecretKeys)) -}}
{{- $out = append $out (merge (dict "chartCreds" (not (empty $chartCreds))
      "chartDir" (not (empty (or $chartCreds (and $w.store $v.externalRedis.existingSecret) $w.natsCreds $w.bridgeCreds $w.a2aSecret)))
      "settingsDir" (not (empty (or $w.settingsSecret $model))) "model" (not (empty $model))) $w) -}}
{{- end -}}
{{- toJson (dict "items" $out) -}}
{{- end -}}

{{/* One workload of hermes.workloads by its component. */}}
{{- define "hermes.workload" -}}
{{- $component := index . 1 -}}
{{- range $w := (include "hermes.workloads" (index . 0) | fromJson).items -}}
{{- if eq $w.component $component -}}{{ toJson $w }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* The environment of a workload's container: data dir, where its secret files are, the
     hub switch and its settings; (list $ <workload>). Secrets are never values here. */}}
{{- define "hermes.env" -}}
{{- $root := index . 0 -}}
{{- $w := index . 1 -}}
{{- $settings := merge (deepCopy $w.env) $root.Values.env -}}
{{- $dirs := list -}}
{{- if $w.settingsDir }}{{ $dirs = append $dirs "/etc/hermes/secrets/settings" }}{{ end -}}
{{- if $w.chartDir }}{{ $dirs = append $dirs "/etc/hermes/secrets/chart" }}{{ end -}}
- name: HERMES_DATA_DIR
  value: /data
{{- with $dirs }}
# Secret settings as files, one per setting (the chart's directory last: it wins).
- name: HERMES_SECRETS_DIR
  value: {{ join ":" . | quote }}
{{- end }}
{{- if and $w.store $root.Values.valkey.enabled (eq (include "hermes.valkeyArchitecture" $root) "replication") }}
# The bundled Valkey's primary, found through the sentinels beside its servers
# (credentials: REDIS_URL and REDIS_SENTINEL_PASSWORD, in the files).
- name: REDIS_SENTINELS
  value: {{ include "hermes.valkeyNodes" (list $root 26379) | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ $root.Values.valkey.sentinel.masterName | quote }}
{{- end }}
{{- if and $w.store $root.Values.valkey.enabled (eq (include "hermes.valkeyArchitecture" $root) "cluster") }}
# The bundled Valkey cluster: every node a seed (credentials: REDIS_URL, in the files).
- name: REDIS_CLUSTER_NODES
  value: {{ include "hermes.valkeyNodes" (list $root 6379) | quote }}
{{- end }}
{{- if $w.store }}
{{- with $root.Values.externalRedis }}
{{- if .clusterNodes }}
# The store is a Redis Cluster (credentials and TLS, if any: REDIS_URL, in the files).
- name: REDIS_CLUSTER_NODES
  value: {{ .clusterNodes | quote }}
{{- else if .sentinels }}
# The store's primary, found through Sentinel.
- name: REDIS_SENTINELS
  value: {{ .sentinels | quote }}
- name: REDIS_SENTINEL_MASTER
  value: {{ .sentinelMaster | quote }}
{{- end }}
{{- end }}
{{- end }}
{{- if and $root.Values.hub.enabled $root.Values.nats.enabled }}
# The bundled NATS (no credential in the URL: the .creds file below is the login).
{{- $full := include "hermes.fullname" $root }}
{{- $replicas := int $root.Values.nats.replicas }}
{{- if gt $replicas 1 }}
{{- $urls := list }}
{{- range $i := until $replicas }}{{ $urls = append $urls (printf "nats://%s-nats-%d.%s-nats-cluster:4222" $full $i $full) }}{{ end }}
# Every server of the bundled cluster; the streams and buckets with a copy on each.
- name: NATS_URL
  value: {{ join "," $urls | quote }}
- name: HUB_REPLICAS
  value: {{ $replicas | quote }}
{{- else }}
- name: NATS_URL
  value: {{ printf "nats://%s-nats:4222" $full | quote }}
{{- end }}
{{- end }}
{{- if $w.natsCreds }}
# This workload's own identity on the hub (a user JWT and its nkey seed).
- name: NATS_CREDS_FILE
  value: /etc/hermes/secrets/chart/nats.creds
{{- end }}
{{- if $w.bridgeCreds }}
# The bridges' identity (`bridge`): the Synadia Agent Protocol and remote A2A agents.
- name: HUB_BRIDGE_CREDS_FILE
  value: /etc/hermes/secrets/chart/bridge.creds
{{- end }}
{{- if $root.Values.hub.enabled }}
- name: HERMES_HUB
  value: "true"
{{- end }}
{{- if and (eq $w.component "gateway") (not (hasKey $settings "HERMES_ALLOWED_HOSTS")) }}
{{- $svc := include "hermes.fullname" $root }}
{{- $hosts := list $svc (printf "%s.%s" $svc $root.Release.Namespace) (printf "%s.%s.svc" $svc $root.Release.Namespace) (printf "%s.%s.svc.cluster.local" $svc $root.Release.Namespace) }}
{{- if $root.Values.ingress.enabled }}{{ $hosts = append $hosts $root.Values.ingress.host }}{{ end }}
# The names the gateway answers to (any other Host header is refused: DNS rebinding).
- name: HERMES_ALLOWED_HOSTS
  value: {{ join "," $hosts | quote }}
{{- end }}
{{- if eq $w.component "gateway" }}
{{- range $key := $root.Values.secretEnv }}
- name: {{ $key }}
  valueFrom:
    secretKeyRef:
      name: {{ $w.settingsSecret }}
      key: {{ $key }}
{{- end }}
{{- end }}
{{- range $key, $value := $settings }}
- name: {{ $key }}
  value: {{ $value | quote }}
{{- end }}
{{- end -}}

{{/* A workload's secret files: (list $ <workload>); volumes and their mounts. */}}
{{- define "hermes.secretVolumes" -}}
{{- $root := index . 0 -}}
{{- $w := index . 1 -}}
{{- $v := $root.Values -}}
{{- if $w.settingsDir }}
- name: settings
  projected:
    defaultMode: 288  # 0440: the pod's group (fsGroup) reads, nobody writes
    sources:
      {{- if $w.settingsSecret }}
      - secret:
          name: {{ $w.settingsSecret }}
      {{- else }}
      # Only the model's keys of the gateway's Secret, never its channel tokens.
      - secret:
          name: {{ include "hermes.secretName" $root }}
          optional: true
          items:
            {{- range $key := $v.hub.sharedSecretKeys }}
            - key: {{ $key }}
              path: {{ $key }}
            {{- end }}
      {{- end }}
{{- end }}
{{- if $w.chartDir }}
- name: chart-secrets
  projected:
    defaultMode: 288
    sources:
      {{- if $w.chartCreds }}
      - secret:
          name: {{ $w.name }}-creds
      {{- end }}
      {{- if and $w.store $v.externalRedis.existingSecret }}
      - secret:
          name: {{ $v.externalRedis.existingSecret }}
          items:
            - key: {{ $v.externalRedis.existingSecretKey }}
              path: REDIS_URL
      {{- end }}
      {{- if $w.natsCreds }}
      - secret:
          name: {{ $w.natsCreds }}
          items:
            - key: nats.creds
              path: nats.creds
      {{- end }}
      {{- if $w.bridgeCreds }}
      - secret:
          name: {{ $w.bridgeCreds }}
          items:
            - key: nats.creds
              path: bridge.creds
      {{- end }}
      {{- if $w.a2aSecret }}
      - secret:
          name: {{ $w.a2aSecret }}
          items:
            - key: HUB_A2A_AGENTS
              path: HUB_A2A_AGENTS
      {{- end }}
{{- end }}
{{- end -}}

{{- define "hermes.secretMounts" -}}
{{- $w := . -}}
{{- if $w.settingsDir }}
- name: settings
  mountPath: /etc/hermes/secrets/settings
  readOnly: true
{{- end }}
{{- if $w.chartDir }}
- name: chart-secrets
  mountPath: /etc/hermes/secrets/chart
  readOnly: true
{{- end }}
{{- end -}}

{{/* The service account every pod of the chart runs as. */}}
{{- define "hermes.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (include "hermes.fullname" .) }}
{{- else -}}
{{ .Values.serviceAccount.name | default "default" }}
{{- end -}}
{{- end -}}

{{/* Pod spec lines every pod of the chart has: no Kubernetes API token in any pod (nothing
     in the chart talks to the API server). */}}
{{- define "hermes.podIdentity" -}}
serviceAccountName: {{ include "hermes.serviceAccountName" . }}
automountServiceAccountToken: false
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
{{- range $name := list "REDIS_URL" "NATS_URL" "REDIS_CLUSTER_NODES" "REDIS_SENTINELS" "REDIS_SENTINEL_MASTER" -}}
{{- if or (hasKey $v.secrets $name) (hasKey $v.env $name) -}}
{{- $instead := dict "REDIS_URL" "externalRedis.url (with valkey.enabled=false)" "NATS_URL" "externalNats.url (with nats.enabled=false)" -}}
{{- fail (printf "%s is set by the chart: use %s instead of secrets/env" $name (get $instead $name | default "externalRedis.clusterNodes / externalRedis.sentinels (with valkey.enabled=false)")) -}}
{{- end -}}
{{- end -}}
{{/* Settings in plain environment values: never a secret, never what the chart sets. */}}
{{- $envs := list (list "env" $v.env) (list "hub.env" ($v.hub.env | default dict)) -}}
{{- range $i, $agent := $v.hub.agents -}}
{{- $envs = append $envs (list (printf "hub.agents[%d].env" $i) ($agent.env | default dict)) -}}
{{- end -}}
{{- range $each := $envs -}}
{{- range $name, $_ := index $each 1 -}}
{{- if or (has $name (list "REDIS_URL" "NATS_URL" "HERMES_SECRETS_DIR" "NATS_CREDS_FILE" "HERMES_DATA_DIR" "HERMES_HUB" "REDIS_CLUSTER_NODES" "REDIS_SENTINELS" "REDIS_SENTINEL_MASTER")) (and (eq $name "HUB_REPLICAS") $v.nats.enabled) -}}
{{- fail (printf "%s.%s is set by the chart (the store, the bus and secret files come from valkey/externalRedis, nats/externalNats and the Secrets)" (index $each 0) $name) -}}
{{- end -}}
{{- if regexMatch "(_KEY|_KEYS|_TOKEN|_SECRET|_SECRETS|_PASSWORD)$" (upper $name) -}}
{{- fail (printf "%s.%s looks like a secret: environment values are in the pod spec for anyone who reads it; put it in secrets or existingSecret (an agent's: hub.agents[].existingSecret)" (index $each 0) $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $name := list "HERMES_SECRETS_DIR" "NATS_CREDS_FILE" -}}
{{- if hasKey $v.secrets $name -}}
{{- fail (printf "secrets.%s is set by the chart: it mounts each workload's secret files itself" $name) -}}
{{- end -}}
{{- end -}}
{{- range $key := $v.hub.sharedSecretKeys -}}
{{- if or (hasPrefix "SLACK_" $key) (hasPrefix "TELEGRAM_" $key) (has $key (list "HERMES_API_KEYS" "HERMES_WEBHOOK_SECRETS" "REDIS_URL" "NATS_URL")) -}}
{{- fail (printf "hub.sharedSecretKeys: %s is the gateway's alone (channel tokens, API keys, webhook secrets, the store and the bus never go to hub pods); list only the model's keys" $key) -}}
{{- end -}}
{{- end -}}
{{- if and $v.secretEnv (not (or $v.existingSecret $v.secrets)) -}}
{{- fail "secretEnv names keys of the gateway's Secret, but there is none: set existingSecret or secrets" -}}
{{- end -}}
{{- if and $v.nats.enabled $v.hub.enabled -}}
{{- $named := list -}}
{{- range $k, $s := ($v.externalNats.credsSecrets | default dict) -}}{{- if $s -}}{{- $named = append $named (printf "externalNats.credsSecrets.%s" $k) -}}{{- end -}}{{- end -}}
{{- range $i, $agent := $v.hub.agents -}}{{- if $agent.natsCredsSecret -}}{{- $named = append $named (printf "hub.agents[%d].natsCredsSecret" $i) -}}{{- end -}}{{- end -}}
{{- with $named -}}
{{- fail (printf "%s: .creds files are for a NATS of yours (externalNats, nats.enabled=false); with the bundled NATS the chart's issuer Job issues each workload's own" (join ", " .)) -}}
{{- end -}}
{{- end -}}
{{- if not $v.podSecurityContext.fsGroup -}}
{{- fail "podSecurityContext.fsGroup is not set: the pods' secret files are readable by that group only (mode 0440)" -}}
{{- end -}}
{{- with $v.networkPolicy -}}
{{- if and .enabled (not (kindIs "bool" .egress.internet)) -}}
{{- fail "networkPolicy.egress.internet is true or false" -}}
{{- end -}}
{{- end -}}
{{- $external := include "hermes.externalStore" . -}}
{{- with $v.externalRedis -}}
{{- if and .clusterNodes .sentinels -}}
{{- fail "externalRedis.clusterNodes and externalRedis.sentinels are both set: a store is a Redis Cluster or a primary behind Sentinel, not both" -}}
{{- end -}}
{{- if ne (empty .sentinels) (empty .sentinelMaster) -}}
{{- fail "externalRedis.sentinels and externalRedis.sentinelMaster go together: the sentinels, and the name they monitor the primary under" -}}
{{- end -}}
{{- end -}}
{{- if and $v.valkey.enabled $external -}}
{{- fail "valkey.enabled and externalRedis both name the store: set valkey.enabled=false to use externalRedis" -}}
{{- end -}}
{{- $architecture := include "hermes.valkeyArchitecture" . -}}
{{- if not (has $architecture (list "standalone" "replication" "cluster")) -}}
{{- fail (printf "valkey.architecture=%s: use standalone (one server), replication (a primary, replicas and Sentinel) or cluster" $architecture) -}}
{{- end -}}
{{- if and (not $v.valkey.enabled) (ne $architecture "standalone") -}}
{{- fail (printf "valkey.architecture=%s describes the bundled Valkey, but valkey.enabled=false: for a store of yours set externalRedis.sentinels / externalRedis.clusterNodes, and leave valkey.architecture at standalone" $architecture) -}}
{{- end -}}
{{- if and $v.valkey.enabled (eq $architecture "cluster") -}}
{{- if lt (int $v.valkey.cluster.primaries) 3 -}}
{{- fail (printf "valkey.cluster.primaries=%v: a cluster needs 3 or more primaries (a failover needs a majority of them to agree)" $v.valkey.cluster.primaries) -}}
{{- end -}}
{{- if lt (int $v.valkey.cluster.replicasPerPrimary) 1 -}}
{{- fail (printf "valkey.cluster.replicasPerPrimary=%v: use 1 or more (the gateway's writes wait for a replica's copy, HERMES_STORE_REPLICA_ACKS=1, and a primary lost without a replica loses its slots)" $v.valkey.cluster.replicasPerPrimary) -}}
{{- end -}}
{{- end -}}
{{- if and $v.valkey.enabled (ne $architecture "standalone") -}}
{{- if not (has $v.valkey.antiAffinity (list "preferred" "required")) -}}
{{- fail "valkey.antiAffinity is preferred or required" -}}
{{- end -}}
{{- end -}}
{{- if and $v.valkey.enabled (eq $architecture "replication") -}}
{{- if lt (int $v.valkey.replicas) 3 -}}
{{- fail (printf "valkey.replicas=%v with valkey.architecture=replication: use 3 or more (a sentinel runs beside each server and a failover needs a majority of them: with 2, losing the primary's pod leaves 1 of 2, and no replica is promoted)" $v.valkey.replicas) -}}
{{- end -}}
{{- if not (regexMatch "^[A-Za-z0-9][-A-Za-z0-9_.]*$" (toString $v.valkey.sentinel.masterName)) -}}
{{- fail "valkey.sentinel.masterName: letters, digits, '-', '_' and '.' (a name in sentinel.conf)" -}}
{{- end -}}
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
{{- if and $v.nats.enabled (not (has (int $v.nats.replicas) (list 1 3 5))) -}}
{{- fail (printf "nats.replicas=%v: use 1 (one server), 3 or 5 (a JetStream cluster keeps a majority up: an even number survives no more failures than one fewer)" $v.nats.replicas) -}}
{{- end -}}
{{- if and $v.nats.enabled (not (has $v.nats.antiAffinity (list "preferred" "required"))) -}}
{{- fail "nats.antiAffinity is preferred or required" -}}
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
{{- if has $agent.id (list "hub" "schema-admin") -}}
{{- fail (printf "hub.agents[%d].id %q is reserved: it is an identity of the hub's own (its core, the schema admin)" $i $agent.id) -}}
{{- end -}}
{{- if gt (len $agent.id) 57 -}}
{{- fail (printf "hub.agents[%d].id %q is longer than 57 characters (it names its pods' label agent-<id>, at most 63)" $i $agent.id) -}}
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

{{/* The annotations of the issuer's hook resources: (weight). Made again at each install
     and upgrade, gone once it succeeded. */}}
{{- define "hermes.issuerHook" -}}
helm.sh/hook: pre-install,pre-upgrade
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end -}}
