{{/*
Names, labels, the configuration file and the checks that refuse values which would break the
service on Kubernetes (each `fail` names the value and what to set).
*/}}

{{- define "sandbox.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sandbox.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sandbox.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sandbox.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "sandbox.labels" -}}
{{ include "sandbox.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "sandbox.image" -}}
{{- printf "%s:%s" (required "image.repository: the image holding the sandbox binary" .Values.image.repository) (.Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "sandbox.secretName" -}}
{{- .Values.secret.existingSecret | default (printf "%s-secret" (include "sandbox.fullname" .)) -}}
{{- end -}}

{{/* The user's TOML (sandbox.config), parsed; fails on a syntax error or a chart-owned table. */}}
{{- define "sandbox.userConfig" -}}
{{- $c := fromToml (.Values.sandbox.config | default "") -}}
{{- if hasKey $c "Error" -}}
{{- fail (printf "sandbox.config is not valid TOML: %s" $c.Error) -}}
{{- end -}}
{{- range $t := list "service" "runtime" "audit" -}}
{{- if hasKey $c $t -}}
{{- fail (printf "sandbox.config must not hold [%s]: the chart writes it from the values under sandbox (and the Secret)" $t) -}}
{{- end -}}
{{- end -}}
{{- toJson $c -}}
{{- end -}}

{{/*
The longest an execution may take, in ms: max over profiles of timeout_max_ms + grace_ms (the
service's defaults, 300000 and 1000, where a profile leaves them out). A profile of sandbox.config
replaces the built-in of the same name; the built-ins are python-default and typescript-default
(300000 + 1000) and python-analysis and typescript-analysis (120000 + 1000).
*/}}
{{- define "sandbox.longestTimeoutMs" -}}
{{- $c := include "sandbox.userConfig" . | fromJson -}}
{{- $each := dict "python-default" 301000 "typescript-default" 301000 "python-analysis" 121000 "typescript-analysis" 121000 -}}
{{- range $name, $p := ($c.profiles | default dict) -}}
{{- $l := $p.limits | default dict -}}
{{- $_ := set $each $name (add (int64 ($l.timeout_max_ms | default 300000)) (int64 ($l.grace_ms | default 1000))) -}}
{{- end -}}
{{- $longest := 0 -}}
{{- range $name, $t := $each -}}
{{- if gt (int64 $t) (int64 $longest) }}{{ $longest = int64 $t }}{{ end -}}
{{- end -}}
{{- $longest -}}
{{- end -}}

{{/* [service] shutdown_grace_ms: the value, or longest + margin; refuses one below the longest. */}}
{{- define "sandbox.shutdownGraceMs" -}}
{{- $longest := include "sandbox.longestTimeoutMs" . | int64 -}}
{{- $set := .Values.sandbox.shutdownGraceMs | int64 -}}
{{- if eq $set 0 -}}
{{- add $longest (.Values.sandbox.shutdownMarginMs | int64) -}}
{{- else if lt $set $longest -}}
{{- fail (printf "sandbox.shutdownGraceMs %d is below the longest profile timeout_max_ms + grace_ms, %d: executions still running at the end of the grace would be killed" $set $longest) -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/* terminationGracePeriodSeconds: preStop sleep + drain + shutdown grace + margin, or a value at least that. */}}
{{- define "sandbox.terminationGracePeriodSeconds" -}}
{{- $ms := add (mul (.Values.preStopSleepSeconds | int64) 1000) (.Values.sandbox.drainDelayMs | int64) (include "sandbox.shutdownGraceMs" . | int64) -}}
{{- $need := add (div (add $ms 999) 1000) (.Values.terminationMarginSeconds | int64) -}}
{{- $set := .Values.terminationGracePeriodSeconds | int64 -}}
{{- if eq $set 0 -}}
{{- $need -}}
{{- else if lt $set $need -}}
{{- fail (printf "terminationGracePeriodSeconds %d is below preStopSleepSeconds + sandbox.drainDelayMs + shutdown grace (longest profile timeout + grace) + terminationMarginSeconds = %d s: Kubernetes would SIGKILL executions still within their timeout" $set $need) -}}
{{- else -}}
{{- $set -}}
{{- end -}}
{{- end -}}

{{/* [runtime] uid_base for the profile; refuses one whose ids leave 0-65535 under userns. */}}
{{- define "sandbox.uidBase" -}}
{{- $set := .Values.sandbox.uidBase | int64 -}}
{{- if eq .Values.securityProfile "userns" -}}
{{- $base := ternary 50000 $set (eq $set 0) -}}
{{- if gt (add $base 1000 4096) 65536 -}}
{{- fail (printf "sandbox.uidBase %d: under securityProfile userns the pod's user namespace holds only ids 0-65535, and the sandboxes use uid_base .. uid_base + 5095; set it at most 60440 (0 picks 50000)" $base) -}}
{{- end -}}
{{- $base -}}
{{- else -}}
{{- ternary 1900000000 $set (eq $set 0) -}}
{{- end -}}
{{- end -}}

{{/* Checks that need no output; included once by the Deployment. */}}
{{- define "sandbox.checks" -}}
{{- if not (has .Values.securityProfile (list "privileged" "userns")) -}}
{{- fail (printf "securityProfile %q: must be privileged or userns" .Values.securityProfile) -}}
{{- end -}}
{{- $probe := .Values.probes.readiness -}}
{{- $unready := mul ($probe.periodSeconds | int64) ($probe.failureThreshold | int64) 1000 -}}
{{- if lt (.Values.sandbox.drainDelayMs | int64) $unready -}}
{{- fail (printf "sandbox.drainDelayMs %d is below the readiness probe's periodSeconds x failureThreshold (%d ms): the pod would stop accepting before probes see it unready" (.Values.sandbox.drainDelayMs | int64) $unready) -}}
{{- end -}}
{{- if and (not .Values.secret.existingSecret) (not .Values.secret.auditUrl) -}}
{{- fail "secret.auditUrl (or secret.existingSecret): several pods need one shared PostgreSQL audit log; a pod's own SQLite log would vanish with it" -}}
{{- end -}}
{{- if and (not .Values.secret.existingSecret) (not .Values.secret.apiKeys) (not .Values.insecureNoAuth) -}}
{{- fail "secret.apiKeys: the pods listen on the pod network and need API keys (or insecureNoAuth: true, letting anyone who reaches the Service run code)" -}}
{{- end -}}
{{- $sm := .Values.metrics.serviceMonitor -}}
{{- if and $sm.enabled (not .Values.metrics.unauthenticated) (not .Values.insecureNoAuth) (not ($sm.authorization).secretName) -}}
{{- fail "metrics.serviceMonitor.authorization.secretName: with API keys /metrics answers only a key with roles [\"metrics\"]; name the Secret (and key) holding one, or set metrics.unauthenticated: true" -}}
{{- end -}}
{{- if lt (.Values.sandbox.maxConcurrency | int64) 1 -}}
{{- fail "sandbox.maxConcurrency: set it (at least 1); 0 would count the node's cores, not the pod's CPU limit" -}}
{{- end -}}
{{- if and (eq .Values.securityProfile "userns") (not (has .Values.userns.tun.mode (list "devicePlugin" "cdi" "none"))) -}}
{{- fail (printf "userns.tun.mode %q: must be devicePlugin, cdi or none" .Values.userns.tun.mode) -}}
{{- end -}}
{{- end -}}

{{/* A TOML string: JSON's escapes are a subset of TOML basic strings' (Go's encoder never writes \/). */}}
{{- define "sandbox.tomlString" -}}
{{- toJson . -}}
{{- end -}}

{{/* The ConfigMap's config.toml: [service], [runtime], then the user's profiles. */}}
{{- define "sandbox.configToml" -}}
{{- $s := .Values.sandbox -}}
{{- $_ := include "sandbox.userConfig" . -}}
# Written by the Helm chart deploy/helm/sandbox. The Secret's secret.toml ([audit] and
# [[service.api_keys]]) is appended to it at pod start.
[service]
listen = {{ printf "0.0.0.0:%d" ($s.port | int64) | toJson }}
max_concurrency = {{ $s.maxConcurrency | int64 }}
queue_max = {{ $s.queueMax | int64 }}
body_max_bytes = {{ $s.bodyMaxBytes | int64 }}
drain_delay_ms = {{ $s.drainDelayMs | int64 }}
shutdown_grace_ms = {{ include "sandbox.shutdownGraceMs" . }}
refusals_per_minute = {{ $s.refusalsPerMinute | int64 }}
refusal_burst = {{ $s.refusalBurst | int64 }}
metrics_unauthenticated = {{ .Values.metrics.unauthenticated | default false }}

[runtime]
uid_base = {{ include "sandbox.uidBase" . }}
data_dir = "/var/lib/sandbox"
{{- with $s.environmentsDir }}
environments_dir = {{ include "sandbox.tomlString" . }}
{{- end }}
{{- with $s.config }}

{{ . }}
{{- end }}
{{- end -}}

{{/* The Secret's secret.toml: [audit] (the PostgreSQL URL) and the API keys. */}}
{{- define "sandbox.secretToml" -}}
{{- $a := .Values.sandbox.audit -}}
[audit]
url = {{ include "sandbox.tomlString" .Values.secret.auditUrl }}
lease_ttl_ms = {{ $a.leaseTtlMs | int64 }}
retention_days = {{ $a.retentionDays | int64 }}
retention_max_events = {{ $a.retentionMaxEvents | int64 }}
{{- range $k := .Values.secret.apiKeys }}

[[service.api_keys]]
name = {{ include "sandbox.tomlString" (required "secret.apiKeys[].name" $k.name) }}
sha256 = {{ include "sandbox.tomlString" (required "secret.apiKeys[].sha256: printf %s KEY | sha256sum" $k.sha256) }}
{{- /* profiles: [] is no profile (a scraper's key), not every profile: only a missing key means "*". */}}
{{- if hasKey $k "profiles" }}
profiles = {{ $k.profiles | default (list) | toJson }}
{{- else }}
profiles = ["*"]
{{- end }}
{{- with $k.roles }}
roles = {{ toJson . }}
{{- end }}
{{- with $k.maxConcurrent }}
max_concurrent = {{ . | int64 }}
{{- end }}
{{- end }}
{{- end -}}
