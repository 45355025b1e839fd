{{/* The release's resource name: the release name, with the chart's unless it holds it. */}}
{{- define "tt-backend.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "tt-backend.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "tt-backend.labels" -}}
{{ include "tt-backend.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "tt-backend.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* tt_llm's `model` option, from model.source and model.path. */}}
{{- define "tt-backend.modelOption" -}}
{{- $m := .Values.model -}}
{{- if eq $m.source "package" -}}
{{- if $m.path }}/models/packages/{{ $m.path }}{{ end -}}
{{- else if eq $m.source "pvc" -}}
{{- if not $m.pvc.claimName }}{{ fail "model.source pvc needs model.pvc.claimName" }}{{ end -}}
{{- if not $m.path }}{{ fail "model.source pvc needs model.path (the model inside the claim)" }}{{ end -}}
/models/{{ $m.path }}
{{- else if eq $m.source "image" -}}
{{- $m.path -}}
{{- else -}}
{{- fail (printf "model.source must be package, pvc or image, not %q" $m.source) -}}
{{- end -}}
{{- end -}}

{{- define "tt-backend.tenstorrent" -}}
{{- if or .Values.tenstorrent.resource .Values.tenstorrent.dra.enabled }}true{{ end -}}
{{- end -}}

{{/* The engine options: engine, then what the other values imply unless engine sets it. */}}
{{- define "tt-backend.engineOptions" -}}
{{- $options := dict -}}
{{- range $key, $value := .Values.engine -}}
{{- $_ := set $options $key (toString $value) -}}
{{- end -}}
{{- $model := include "tt-backend.modelOption" . -}}
{{- if and $model (not (hasKey $options "model")) -}}
{{- $_ := set $options "model" $model -}}
{{- end -}}
{{- if and .Values.model.servedModelName (not (hasKey $options "served_model_name")) -}}
{{- $_ := set $options "served_model_name" .Values.model.servedModelName -}}
{{- end -}}
{{- if and (include "tt-backend.tenstorrent" .) (not (hasKey $options "device")) -}}
{{- $_ := set $options "device" "tt" -}}
{{- end -}}
{{- toYaml $options -}}
{{- end -}}

{{/* The name clients send and the metrics' model_name label. */}}
{{- define "tt-backend.servedName" -}}
{{- $options := include "tt-backend.engineOptions" . | fromYaml -}}
{{- required "model.servedModelName (or engine.served_model_name) is needed: the front and the autoscalers' queries use it" (get $options "served_model_name") -}}
{{- end -}}

{{/* The model's volumes in both containers: the model (package or claim) and, for a model not in
the image, the converted-checkpoint cache, so the GGUF is converted once per pod (its lock file
holds the second container back). */}}
{{- define "tt-backend.modelMounts" -}}
{{- if ne .Values.model.source "image" -}}
- {name: models, mountPath: /models{{ if eq .Values.model.source "pvc" }}, readOnly: {{ .Values.model.pvc.readOnly }}{{ end }}}
- {name: model-cache, mountPath: /opt/tt_backend/cache/models}
{{- end -}}
{{- end -}}
