{{/*
The OpenTelemetry Collector for runs whose logs are on node-local disks (collector.enabled;
docs/fleet.md, "Runs on node-local disks: OTLP"). Two configurations:

- the node agent (a DaemonSet, templates/collector.yaml): the filelog receiver tails the run
  logs under collector.logDir and the loadbalancing exporter sends every record of a file to
  one daemon pod, over OTLP/gRPC, to the forwarder below;
- the forwarder (a container beside each daemon, templates/statefulset.yaml): an OTLP/gRPC
  receiver and an otlphttp exporter posting to the daemon's own POST /v1/logs on 127.0.0.1
  with the daemon's control token. It exists because the loadbalancing exporter speaks OTLP
  (gRPC) only, and the daemon speaks OTLP/HTTP only.

Component settings are those of the opentelemetry-collector-contrib READMEs of the pinned
image (collector.image.tag): receiver/filelogreceiver, pkg/stanza/docs/operators/copy.md,
extension/storage/filestorage, exporter/loadbalancingexporter, extension/bearertokenauthextension,
and the core's receiver/otlpreceiver and exporter/otlphttpexporter.
*/}}

{{- define "rlguard.collectorName" -}}
{{- printf "%s-collector" (include "rlguard.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Not the daemon's app.kubernetes.io/name: its Services and StatefulSet must never select a collector pod. */}}
{{- define "rlguard.collectorSelectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-collector" (include "rlguard.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "rlguard.collectorLabels" -}}
helm.sh/chart: {{ include "rlguard.chart" . }}
{{ include "rlguard.collectorSelectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: collector
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "rlguard.collectorImage" -}}
{{- printf "%s:%s" .Values.collector.image.repository .Values.collector.image.tag }}
{{- end }}

{{/* Paths inside the collector containers. */}}
{{- define "rlguard.collectorConfigDir" -}}/etc/otelcol{{- end }}
{{- define "rlguard.collectorOffsetsDir" -}}/var/lib/otelcol/offsets{{- end }}
{{- define "rlguard.controlTokenFile" -}}{{ include "rlguard.stateDir" . }}/control.token{{- end }}

{{/* The node's log directory, without a trailing slash (it is also a root the daemon watches). */}}
{{- define "rlguard.collectorLogDir" -}}
{{- $d := .Values.collector.logDir | trimSuffix "/" }}
{{- if or (not (hasPrefix "/" $d)) (eq $d "") }}
{{- fail "collector.logDir is the absolute directory of the run logs on each node" }}
{{- end }}
{{- $d -}}
{{- end }}

{{/*
The node agent's configuration (the DaemonSet).
*/}}
{{- define "rlguard.collectorAgentConfig" -}}
{{- $c := .Values.collector -}}
{{- $dir := include "rlguard.collectorLogDir" . -}}
{{- $include := list -}}
{{- range $c.include }}{{ $include = append $include (printf "%s/%s" $dir (trimPrefix "/" .)) }}{{ end -}}
{{- $filelog := dict
      "include" $include
      "start_at" $c.startAt
      "include_file_path" true
      "include_file_name" false
      "max_log_size" (int $c.maxLogSize)
      "storage" "file_storage"
      "operators" (list (dict "type" "copy" "from" "attributes[\"log.file.path\"]" "to" "resource[\"service.name\"]")) -}}
{{- with $c.exclude }}{{ $_ := set $filelog "exclude" . }}{{ end -}}
{{- with $c.excludeOlderThan }}{{ $_ := set $filelog "exclude_older_than" . }}{{ end -}}
{{- $otlp := dict "timeout" "10s" "tls" (dict "insecure" true) -}}
{{- $dns := dict "hostname" (printf "%s-shards.%s.svc.%s" (include "rlguard.fullname" .) .Release.Namespace $c.clusterDomain) "port" (int $c.grpcPort) -}}
{{- $cfg := dict
      "extensions" (dict "file_storage" (dict "directory" (include "rlguard.collectorOffsetsDir" .) "create_directory" false))
      "receivers" (dict "filelog" $filelog)
      "processors" (dict "batch" (dict "send_batch_size" 512 "send_batch_max_size" (int $c.batchMaxRecords) "timeout" "1s"))
      "exporters" (dict "loadbalancing" (dict "routing_key" "service" "protocol" (dict "otlp" $otlp) "resolver" (dict "dns" $dns)))
      "service" (dict "extensions" (list "file_storage") "pipelines" (dict "logs" (dict "receivers" (list "filelog") "processors" (list "batch") "exporters" (list "loadbalancing")))) -}}
{{ toYaml $cfg }}
{{- end }}

{{/*
The forwarder's configuration (beside each daemon).
*/}}
{{- define "rlguard.collectorForwarderConfig" -}}
{{- $c := .Values.collector -}}
{{- $cfg := dict
      "extensions" (dict "bearertokenauth/daemon" (dict "filename" (include "rlguard.controlTokenFile" .)))
      "receivers" (dict "otlp" (dict "protocols" (dict "grpc" (dict "endpoint" (printf "0.0.0.0:%d" (int $c.grpcPort))))))
      "exporters" (dict "otlphttp" (dict "logs_endpoint" (printf "http://127.0.0.1:%d/v1/logs" (int .Values.daemon.port)) "compression" "gzip" "auth" (dict "authenticator" "bearertokenauth/daemon")))
      "service" (dict "extensions" (list "bearertokenauth/daemon") "pipelines" (dict "logs" (dict "receivers" (list "otlp") "exporters" (list "otlphttp")))) -}}
{{ toYaml $cfg }}
{{- end }}

{{/*
The init container's program: the daemon's control token (rlguard.daemon.control.control_token:
the file the daemon itself creates once and reads at every start) made to exist before either
container starts, as one line without a newline. The forwarder's bearertokenauth extension
reads the file whole (older releases send a trailing newline along, an invalid header), and it
starts at the same time as the daemon, which would otherwise create the file a moment later.
*/}}
{{- define "rlguard.controlTokenProgram" -}}
import os, sys
from rlguard.daemon.control import control_token
state = sys.argv[1]
token = control_token(state)  # the existing token, or a new one, mode 0600
tmp = os.path.join(state, ".control.token.new")
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(fd, token.encode())
os.close(fd)
os.replace(tmp, os.path.join(state, "control.token"))
{{- end }}

{{/* Refusals: an enabled collector needs the directory it reads. */}}
{{- define "rlguard.checkCollector" -}}
{{- if .Values.collector.enabled }}
{{- $_ := include "rlguard.collectorLogDir" . }}
{{- if not .Values.collector.include }}
{{- fail "collector.include: the log files to tail under collector.logDir, e.g. [\"**/*.jsonl\"]" }}
{{- end }}
{{- end }}
{{- end }}
