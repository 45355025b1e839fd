// Validates PodMonitor, ServiceMonitor and ScaledObject manifests against their CRD schemas (npm's
// @kubernetes-models packages). Input: a JSON array of manifests on stdin; output: one line per
// manifest, "ok" or the validation error; exit 1 when any failed.
import { PodMonitor, ServiceMonitor } from "@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1";
import { ScaledObject } from "@kubernetes-models/keda/keda.sh/v1alpha1";

const models = {
  "monitoring.coreos.com/v1/PodMonitor": PodMonitor,
  "monitoring.coreos.com/v1/ServiceMonitor": ServiceMonitor,
  "keda.sh/v1alpha1/ScaledObject": ScaledObject,
};
let input = "";
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  let failed = false;
  for (const manifest of JSON.parse(input)) {
    const Model = models[`${manifest.apiVersion}/${manifest.kind}`];
    try {
      if (!Model) throw new Error(`no schema for ${manifest.apiVersion} ${manifest.kind}`);
      new Model(manifest).validate();
      console.log("ok");
    } catch (error) {
      failed = true;
      console.log(String(error.message).replace(/\n/g, " "));
    }
  }
  process.exit(failed ? 1 : 0);
});
