{{/*
Names and labels. Resource names are cut to 63 characters (DNS labels).
*/}}
{{- define "rlguard.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* RELEASE-rlguard, or the release name alone when it already contains the chart name. */}}
{{- define "rlguard.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rlguard.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rlguard.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlguard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rlguard.labels" -}}
helm.sh/chart: {{ include "rlguard.chart" . }}
{{ include "rlguard.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: daemon
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rlguard.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rlguard.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "rlguard.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}


{{/*
Paths inside the pod. The daemon config names them, and the Deployment mounts them.
*/}}
{{- define "rlguard.stateDir" -}}/var/lib/rlguard{{- end }}
{{- define "rlguard.configFile" -}}/etc/rlguard/config/config.yaml{{- end }}
{{- define "rlguard.rulesDir" -}}/etc/rlguard/rules{{- end }}
{{- define "rlguard.defaultPack" -}}/opt/rlguard/rules/default.yaml{{- end }}
{{- define "rlguard.slackDir" -}}/etc/rlguard/slack{{- end }}
{{- define "rlguard.slackFile" -}}{{ include "rlguard.slackDir" . }}/webhook-url{{- end }}
{{- define "rlguard.alertmanagerDir" -}}/etc/rlguard/alertmanager{{- end }}
{{- define "rlguard.alertmanagerTokenFile" -}}{{ include "rlguard.alertmanagerDir" . }}/token{{- end }}
{{- define "rlguard.receiverDir" -}}/etc/rlguard/slack-receivers/{{ . }}{{- end }}

{{/*
Sharding: N = shards pods, sharing nothing but the logs; one existing claim cannot hold the
state of several pods.
*/}}
{{- define "rlguard.checkSharding" -}}
{{- if and (gt (int .Values.shards) 1) .Values.persistence.existingClaim }}
{{- fail "persistence.existingClaim holds one pod's state: with shards > 1 leave it empty (each shard gets its own claim from volumeClaimTemplates)" }}
{{- end }}
{{- end }}

{{/* 0.0.0.0, not the daemon's default 127.0.0.1: the Service, probes and Prometheus come from outside the pod. */}}
{{- define "rlguard.listen" -}}0.0.0.0:{{ .Values.daemon.port }}{{- end }}

{{/*
The daemon's YAML config (`rlguard daemon --config`), from .Values.config and the routing part
of .Values.slack. Never the webhook URL: the Deployment passes the Secret's file with
--slack-webhook-url-file.
*/}}
{{- define "rlguard.daemonConfig" -}}
{{- $c := .Values.config -}}
{{- $stop := dict "pid_file" $c.stop.pidFile "command_timeout" $c.stop.commandTimeout -}}
{{- if $c.stop.signal }}{{ $_ := set $stop "signal" $c.stop.signal }}{{ end -}}
{{- if $c.stop.command }}{{ $_ := set $stop "command" $c.stop.command }}{{ end -}}
{{- $s := .Values.slack -}}
{{- $slack := dict "group_wait" $s.groupWait "group_interval" $s.groupInterval "repeat_interval" $s.repeatInterval "send_resolved" $s.sendResolved "min_severity" $s.minSeverity -}}
{{- $receivers := list -}}
{{- range $s.receivers }}{{ $receivers = append $receivers (dict "name" .name "webhook_url_file" (printf "%s/webhook-url" (include "rlguard.receiverDir" .name))) }}{{ end -}}
{{- if $receivers }}{{ $_ := set $slack "receivers" $receivers }}{{ end -}}
{{- $routes := list -}}
{{- range $s.routes }}{{ $routes = append $routes (dict "matchers" .matchers "receiver" .receiver "continue" (default false .continue)) }}{{ end -}}
{{- if $routes }}{{ $_ := set $slack "routes" $routes }}{{ end -}}
{{- $cfg := dict "watch" $c.watch "state_dir" (include "rlguard.stateDir" .) "listen" (include "rlguard.listen" .) "poll_interval" $c.pollInterval "eval_interval" $c.evalInterval "quiet_interval" $c.quietInterval "eval_budget" $c.evalBudget "discover_interval" $c.discoverInterval "save_interval" $c.saveInterval "stall_after" $c.stallAfter "max_runs" $c.maxRuns "max_metrics_per_run" $c.maxMetricsPerRun "stop" $stop "slack" $slack -}}
{{- with $c.pathTemplate }}{{ $_ := set $cfg "path_template" . }}{{ end -}}
{{- $am := .Values.alertmanager -}}
{{- if $am.urls }}
{{- $amc := dict "urls" $am.urls "resend_interval" $am.resendInterval }}
{{- if $am.existingSecret }}{{ $_ := set $amc "token_file" (include "rlguard.alertmanagerTokenFile" .) }}{{ end }}
{{- $_ := set $cfg "alertmanager" $amc }}
{{- end }}
{{- if .Values.collector.enabled }}
{{- /* pushed lines are placed by name under a watch root: the node's log directory is one */}}
{{- $dir := include "rlguard.collectorLogDir" . }}
{{- if not (has $dir $c.watch) }}{{ $_ := set $cfg "watch" (append $c.watch $dir) }}{{ end }}
{{- $_ := set $cfg "otlp" (dict "max_line" (int .Values.collector.maxLogSize)) }}
{{- end }}
{{- with $c.cluster }}{{ $_ := set $cfg "cluster" . }}{{ end -}}
{{- if .Values.rules }}
{{- $rules := list (include "rlguard.rulesDir" .) }}
{{- if .Values.rulesIncludeDefault }}{{ $rules = prepend $rules (include "rlguard.defaultPack" .) }}{{ end }}
{{- $_ := set $cfg "rules" $rules }}
{{- end -}}
{{ toYaml $cfg }}
{{- end }}

{{/*
The groups of files/prometheus-rules.yaml. Its selectors say job="rlguard"; that becomes
job="<prometheusRule.jobName>" (default: the chart name, the job the ServiceMonitor's jobLabel
gives). .Values.prometheusRule.ruleLabels are added to every alerting rule (labels the file
sets win).
*/}}
{{- define "rlguard.prometheusRuleGroups" -}}
{{- $raw := .Files.Get "files/prometheus-rules.yaml" }}
{{- if not $raw }}
{{- fail "prometheusRule.enabled needs files/prometheus-rules.yaml in the chart" }}
{{- end }}
{{- $job := default (include "rlguard.name" .) .Values.prometheusRule.jobName }}
{{- $raw = replace "job=\"rlguard\"" (printf "job=\"%s\"" $job) $raw }}
{{- $doc := fromYaml $raw }}
{{- if hasKey $doc "Error" }}
{{- fail (printf "files/prometheus-rules.yaml is not valid YAML: %s" $doc.Error) }}
{{- end }}
{{- if not $doc.groups }}
{{- fail "files/prometheus-rules.yaml has no groups" }}
{{- end }}
{{- $extra := merge (deepCopy (default (dict) .Values.prometheusRule.ruleLabels)) (dict "notify" (include "rlguard.alertPath" .)) }}
{{- range $g := $doc.groups }}
{{- range $r := $g.rules }}
{{- if hasKey $r "alert" }}
{{- $_ := set $r "labels" (merge (deepCopy (default (dict) $r.labels)) $extra) }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $doc.groups }}
{{- end }}

{{/*
Fails when a Slack credential was pasted anywhere in the values (an extraEnv value, an
annotation, a stop command...): it would land in a manifest and in the release history.
*/}}
{{- define "rlguard.noCredentials" -}}
{{- $all := toJson .Values }}
{{- if regexMatch "hooks\\.slack\\.com/|xox[abpr]-[0-9A-Za-z-]{10,}" $all }}
{{- fail "a Slack webhook URL or token is in the values: keep it in a Secret and set slack.existingSecret (and slack.key)" }}
{{- end }}
{{- end }}

{{/*
The one alert path of a deployment (alertPath): "daemon" (the daemon's Slack; Prometheus alerts
carry notify="daemon" and the example Alertmanager route keeps them off the pager) or
"alertmanager" (Alertmanager sends; the daemon's own Slack must be off). Never both.
*/}}
{{- define "rlguard.alertPath" -}}
{{- $path := default "daemon" .Values.alertPath }}
{{- if not (has $path (list "daemon" "alertmanager")) }}
{{- fail (printf "alertPath is daemon or alertmanager, not %q" $path) }}
{{- end }}
{{- if and (eq $path "alertmanager") (or .Values.slack.existingSecret .Values.slack.receivers) }}
{{- fail "alertPath=alertmanager sends through Alertmanager, and slack.existingSecret makes the daemon send too: a person would be paged twice. Unset slack.existingSecret (and slack.receivers), or use alertPath=daemon" }}
{{- end }}
{{- $path -}}
{{- end }}

{{/*
The daemon posting to Alertmanager (alertmanager.urls) and sending Slack itself
(slack.existingSecret, slack.receivers) would notify everyone twice: Alertmanager routes the
same alerts to Slack. One or the other (docs/slack.md, "Alertmanager or the built-in Slack path").
*/}}
{{- define "rlguard.checkAlertmanager" -}}
{{- if and .Values.alertmanager.urls (or .Values.slack.existingSecret .Values.slack.receivers) }}
{{- fail "alertmanager.urls makes the daemon post its alerts to Alertmanager, and slack.existingSecret makes it send them to Slack too: a person would be paged twice. Unset slack.existingSecret (and slack.receivers), and route in Alertmanager" }}
{{- end }}
{{- end }}
