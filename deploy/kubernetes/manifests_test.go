// Package kubernetes holds the test of the manifests in this folder
// (kubectl apply -k deploy/kubernetes).
package kubernetes

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

// kustomization is what the test reads of kustomization.yaml, strictly.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Labels     []struct {
		Pairs map[string]string `json:"pairs"`
	} `json:"labels"`
	Images []struct {
		Name    string `json:"name"`
		NewTag  string `json:"newTag"`
		NewName string `json:"newName"`
	} `json:"images"`
}

// manifests are the objects of every resource kustomization.yaml lists,
// each decoded strictly (unknown or duplicate fields are errors) into its
// k8s.io/api type.
type manifests struct {
	deployments []appsv1.Deployment
	services    []corev1.Service
	pdbs        []policyv1.PodDisruptionBudget
	hpas        []autoscalingv2.HorizontalPodAutoscaler
	policies    []networkingv1.NetworkPolicy
	secrets     []corev1.Secret
	configMaps  []corev1.ConfigMap
}

func load(t *testing.T) manifests {
	t.Helper()
	var k kustomization
	decode(t, "kustomization.yaml", mustRead(t, "kustomization.yaml"), &k)
	if k.Kind != "Kustomization" || len(k.Resources) == 0 {
		t.Fatalf("kustomization.yaml: kind %q, %d resources", k.Kind, len(k.Resources))
	}
	yamls, _ := filepath.Glob("*.yaml")
	var examples []string // applied by hand, once: never by kubectl apply -k
	for _, y := range yamls {
		switch {
		case strings.HasSuffix(y, ".example.yaml"):
			if slices.Contains(k.Resources, y) {
				t.Errorf("%s is among kustomization.yaml's resources: kubectl apply -k would overwrite what was filled in", y)
			}
			examples = append(examples, y)
		case y != "kustomization.yaml" && !slices.Contains(k.Resources, y):
			t.Errorf("%s is not among kustomization.yaml's resources", y)
		}
	}
	var m manifests
	for _, file := range append(k.Resources, examples...) {
		example := slices.Contains(examples, file)
		for i, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(mustRead(t, file)), -1) {
			if strings.TrimSpace(stripComments(doc)) == "" {
				continue
			}
			var head struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
				t.Fatalf("%s #%d: %v", file, i, err)
			}
			where := file + " " + head.Kind
			switch head.APIVersion + " " + head.Kind {
			case "apps/v1 Deployment":
				m.deployments = append(m.deployments, decodeAs[appsv1.Deployment](t, where, doc))
			case "v1 Service":
				m.services = append(m.services, decodeAs[corev1.Service](t, where, doc))
			case "policy/v1 PodDisruptionBudget":
				m.pdbs = append(m.pdbs, decodeAs[policyv1.PodDisruptionBudget](t, where, doc))
			case "autoscaling/v2 HorizontalPodAutoscaler":
				m.hpas = append(m.hpas, decodeAs[autoscalingv2.HorizontalPodAutoscaler](t, where, doc))
			case "networking.k8s.io/v1 NetworkPolicy":
				m.policies = append(m.policies, decodeAs[networkingv1.NetworkPolicy](t, where, doc))
			case "v1 Secret":
				if !example {
					t.Errorf("%s: a Secret among kustomization.yaml's resources, which kubectl apply -k would overwrite", where)
				}
				m.secrets = append(m.secrets, decodeAs[corev1.Secret](t, where, doc))
			case "v1 ConfigMap":
				m.configMaps = append(m.configMaps, decodeAs[corev1.ConfigMap](t, where, doc))
			default:
				t.Fatalf("%s #%d: %s %s is not a kind this test knows", file, i, head.APIVersion, head.Kind)
			}
		}
	}
	return m
}

func decodeAs[T any](t *testing.T, where, doc string) T {
	var v T
	decode(t, where, []byte(doc), &v)
	return v
}

// decode decodes YAML into v, refusing fields v has not and fields given
// twice.
func decode(t *testing.T, where string, data []byte, v any) {
	t.Helper()
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
}

func stripComments(doc string) string {
	return regexp.MustCompile(`(?m)^\s*#.*$`).ReplaceAllString(doc, "")
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestManifests decodes every manifest strictly and checks that they fit
// together: the Deployment's security settings, its volumes, secrets and
// config map, the Service's, budget's, autoscaler's and policy's targets.
func TestManifests(t *testing.T) {
	m := load(t)
	if len(m.deployments) != 1 || len(m.services) != 1 || len(m.pdbs) != 1 || len(m.hpas) != 1 || len(m.policies) != 1 || len(m.configMaps) != 1 || len(m.secrets) != 2 {
		t.Fatalf("want one Deployment, Service, PodDisruptionBudget, HorizontalPodAutoscaler, NetworkPolicy, ConfigMap and two Secrets")
	}
	d := m.deployments[0]
	pod := d.Spec.Template
	labels := pod.Labels
	matches := func(what string, sel map[string]string) {
		if len(sel) == 0 {
			t.Errorf("%s selects nothing", what)
		}
		for k, v := range sel {
			if labels[k] != v {
				t.Errorf("%s selects %s=%s, which the pods do not have", what, k, v)
			}
		}
	}
	matches("the Deployment", d.Spec.Selector.MatchLabels)
	matches("the Service", m.services[0].Spec.Selector)
	matches("the PodDisruptionBudget", m.pdbs[0].Spec.Selector.MatchLabels)
	matches("the NetworkPolicy", m.policies[0].Spec.PodSelector.MatchLabels)
	if ref := m.hpas[0].Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != d.Name {
		t.Errorf("the autoscaler scales %s %s", ref.Kind, ref.Name)
	}

	ps := pod.Spec.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Error("the pod is not runAsNonRoot with seccomp RuntimeDefault")
	}
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("the container has no securityContext")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("the root file system is not read-only")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Error("capabilities: not all dropped")
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Error("the container lacks CPU and memory requests and a memory limit")
	}

	// Volumes: the cache is an emptyDir mounted where --cache-dir says; the
	// secrets and the config map are the manifests'.
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Spec.Volumes {
		volumes[v.Name] = v
	}
	mounts := map[string]string{} // path → volume
	for _, vm := range c.VolumeMounts {
		if _, ok := volumes[vm.Name]; !ok {
			t.Errorf("mount of volume %s, which the pod does not have", vm.Name)
		}
		mounts[vm.MountPath] = vm.Name
	}
	args := flagValues(c.Args)
	if v := volumes[mounts[args["--cache-dir"]]]; v.EmptyDir == nil {
		t.Errorf("--cache-dir %q is not on an emptyDir", args["--cache-dir"])
	}
	var secretNames, configNames []string
	for _, s := range m.secrets {
		secretNames = append(secretNames, s.Name)
	}
	for _, c := range m.configMaps {
		configNames = append(configNames, c.Name)
	}
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil && !slices.Contains(secretNames, v.Secret.SecretName) {
			t.Errorf("volume %s: no Secret %s", v.Name, v.Secret.SecretName)
		}
		if v.ConfigMap != nil && !slices.Contains(configNames, v.ConfigMap.Name) {
			t.Errorf("volume %s: no ConfigMap %s", v.Name, v.ConfigMap.Name)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil && !slices.Contains(secretNames, e.SecretRef.Name) {
			t.Errorf("envFrom: no Secret %s", e.SecretRef.Name)
		}
	}
	for _, flag := range []string{"--config", "--tokens-file"} {
		dir, file := filepath.Split(args[flag])
		v, ok := volumes[mounts[filepath.Clean(dir)]]
		switch {
		case !ok:
			t.Errorf("%s %s is on no volume", flag, args[flag])
		case v.Secret != nil:
			if _, ok := secretOf(m.secrets, v.Secret.SecretName).StringData[file]; !ok {
				t.Errorf("%s: Secret %s has no %s", flag, v.Secret.SecretName, file)
			}
		case v.ConfigMap != nil:
			if _, ok := configOf(m.configMaps, v.ConfigMap.Name).Data[file]; !ok {
				t.Errorf("%s: ConfigMap %s has no %s", flag, v.ConfigMap.Name, file)
			}
		}
	}
	if !strings.HasPrefix(args["--session-store"], "s3://") {
		t.Errorf("--session-store %q is not an s3:// URL", args["--session-store"])
	}
	// The Service's and policy's port is the container's.
	if tp := m.services[0].Spec.Ports[0].TargetPort; tp.StrVal != "http" || containerPort(c, "http") == 0 {
		t.Errorf("the Service targets port %v, which the container does not name", tp)
	}

	// The scraper's port is --metrics-listen's, named metrics, and the
	// policy lets something in to it.
	_, metricsPort, _ := net.SplitHostPort(args["--metrics-listen"])
	if a := pod.Annotations["prometheus.io/port"]; a == "" || a != metricsPort || a != strconv.Itoa(int(containerPort(c, "metrics"))) {
		t.Errorf("prometheus.io/port %q, --metrics-listen %q, containerPort metrics %d", a, args["--metrics-listen"], containerPort(c, "metrics"))
	}
	if !ingressTo(m.policies[0], "metrics") || !ingressTo(m.policies[0], "http") {
		t.Error("the NetworkPolicy admits nothing to the metrics or the http port")
	}

	// Replicas spread over nodes and zones.
	spread := map[string]bool{}
	for _, c := range pod.Spec.TopologySpreadConstraints {
		if c.LabelSelector != nil {
			matches("a topology spread constraint", c.LabelSelector.MatchLabels)
		}
		spread[c.TopologyKey] = true
	}
	if !spread["kubernetes.io/hostname"] || !spread["topology.kubernetes.io/zone"] {
		t.Errorf("topology spread over %v, not nodes and zones", spread)
	}

	// GOMEMLIMIT is below the memory limit, with room for what is not Go
	// heap, and not so low that the collector runs all the time.
	limit := c.Resources.Limits.Memory().Value()
	if v, ok := envValue(c, "GOMEMLIMIT"); !ok {
		t.Error("no GOMEMLIMIT")
	} else if q, err := resource.ParseQuantity(strings.TrimSuffix(v, "B")); err != nil {
		t.Errorf("GOMEMLIMIT %q: %v", v, err)
	} else if n := q.Value(); n >= limit*95/100 || n < limit/2 {
		t.Errorf("GOMEMLIMIT %s against a limit of %d bytes", v, limit)
	}

	// Every server the configuration names is one the policy lets the pods
	// reach: the MCP servers, the trace collector, the session store.
	var config struct {
		MCPServers map[string]struct {
			URL string `json:"url"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(configOf(m.configMaps, volumes[mounts[filepath.Dir(args["--config"])]].ConfigMap.Name).Data[filepath.Base(args["--config"])]), &config); err != nil {
		t.Fatalf("--config: %v", err)
	}
	urls := []string{"https://s3.amazonaws.com"} // --session-store s3:// without an endpoint
	for _, s := range config.MCPServers {
		urls = append(urls, s.URL)
	}
	if v, _ := envValue(c, "OTEL_EXPORTER_OTLP_ENDPOINT"); v != "" {
		urls = append(urls, v)
	}
	// The collector the Deployment's comment names, for when it is set.
	urls = append(urls, "http://otel-collector.observability:4318")
	for _, u := range urls {
		if err := admits(m.policies[0], u); err != nil {
			t.Errorf("the NetworkPolicy does not admit %s: %v", u, err)
		}
	}
}

// TestAdmits: admits tells, of the shipped policy, the URLs it lets out
// from those it does not, so that TestManifests can fail.
func TestAdmits(t *testing.T) {
	p := load(t).policies[0]
	for u, want := range map[string]bool{
		"http://crm-mcp.tools.svc.cluster.local/mcp":  true,
		"http://crm-mcp.tools.svc.cluster.local:8080": false,
		"http://crm-mcp.other.svc.cluster.local/mcp":  false,
		"http://otel-collector.observability:4318":    true,
		"https://mcp.example.com/mcp":                 true,
		"http://mcp.example.com/mcp":                  false,
		"http://169.254.169.254/latest":               false,
	} {
		if err := admits(p, u); (err == nil) != want {
			t.Errorf("admits %s: %v, want admitted %v", u, err, want)
		}
	}
}

// admits reports why the policy's egress does not let the pods reach rawURL,
// or nil. A host NAME.NAMESPACE, NAME.NAMESPACE.svc or
// NAME.NAMESPACE.svc.cluster.local is a Service in the cluster, reached
// through a rule whose peer selects its namespace; any other host is
// outside, reached through an ipBlock that holds its address (a name
// outside is taken to be a public address). The port is the URL's, or its
// scheme's; a Service's port is taken to be its pods'.
func admits(p networkingv1.NetworkPolicy, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := u.Hostname()
	labels := strings.Split(strings.TrimSuffix(strings.TrimSuffix(host, ".cluster.local"), ".svc"), ".")
	inCluster := net.ParseIP(host) == nil && len(labels) == 2
	for _, rule := range p.Spec.Egress {
		portOK := len(rule.Ports) == 0
		for _, rp := range rule.Ports {
			if rp.Port != nil && rp.Port.String() == port && (rp.Protocol == nil || *rp.Protocol == corev1.ProtocolTCP) {
				portOK = true
			}
		}
		if !portOK {
			continue
		}
		if len(rule.To) == 0 {
			return nil
		}
		for _, peer := range rule.To {
			switch {
			case inCluster && peer.NamespaceSelector != nil && peer.IPBlock == nil:
				sel := peer.NamespaceSelector.MatchLabels
				if len(sel) == 0 && len(peer.NamespaceSelector.MatchExpressions) == 0 || sel["kubernetes.io/metadata.name"] == labels[1] {
					return nil
				}
			case !inCluster && peer.IPBlock != nil:
				ip := net.ParseIP(host)
				if ip == nil {
					ip = net.ParseIP("93.184.215.14") // a public address stands for a public name
				}
				if cidrHolds(peer.IPBlock.CIDR, ip) && !slices.ContainsFunc(peer.IPBlock.Except, func(c string) bool { return cidrHolds(c, ip) }) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("no egress rule for port %s to %s", port, host)
}

func cidrHolds(cidr string, ip net.IP) bool {
	_, n, err := net.ParseCIDR(cidr)
	return err == nil && n.Contains(ip)
}

// ingressTo reports whether an ingress rule of p admits something to the
// container port named port.
func ingressTo(p networkingv1.NetworkPolicy, port string) bool {
	for _, rule := range p.Spec.Ingress {
		for _, rp := range rule.Ports {
			if rp.Port != nil && rp.Port.StrVal == port {
				return true
			}
		}
	}
	return false
}

// envValue returns the value the container's environment gives name.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, e.ValueFrom == nil
		}
	}
	return "", false
}

// TestProbesMatchServer builds spine, checks that every flag the Deployment
// gives it is one spine serve takes, starts it as the Deployment would (with
// a token, so that every path but the probes' needs it), and GETs each
// probe's path without the token, as the kubelet does: each answers 200.
// The probes' port is the one --listen names.
func TestProbesMatchServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts spine")
	}
	m := load(t)
	c := m.deployments[0].Spec.Template.Spec.Containers[0]
	args := flagValues(c.Args)
	_, port, err := net.SplitHostPort(args["--listen"])
	if err != nil {
		t.Fatalf("--listen %q: %v", args["--listen"], err)
	}
	if p := containerPort(c, "http"); port != "8080" || p != 8080 {
		t.Errorf("--listen port %s, containerPort %d", port, p)
	}

	bin := filepath.Join(t.TempDir(), "spine")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = "../../cmd/spine" // a module of its own, in go.work's workspace
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	usage, _ := exec.Command(bin, "serve", "-h").Output()
	for flag := range args {
		if !bytes.Contains(usage, []byte("  "+flag+" ")) {
			t.Errorf("spine serve has no flag %s", flag)
		}
	}

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--cache-dir", filepath.Join(os.TempDir(), "spine-probes-cache"))
	cmd.Env = append(os.Environ(), "SPINE_TOKEN=probe-test-token-0123456789", "SPINE_CONFIG=")
	pr, pw, _ := os.Pipe()
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	addr := waitListening(t, pr)
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	for name, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no HTTP %s probe", name)
			continue
		}
		if p.HTTPGet.Port.StrVal != "http" && p.HTTPGet.Port.IntValue() != 8080 {
			t.Errorf("%s probe on port %v", name, p.HTTPGet.Port)
		}
		resp, err := http.Get("http://" + addr + p.HTTPGet.Path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s probe: GET %s answered %d", name, p.HTTPGet.Path, resp.StatusCode)
		}
	}
	// And a path the server does not have is not 200, nor /metrics without
	// the token: the probes' answers are the server's, not any answer.
	for _, path := range []string{"/nosuchpath", "/metrics"} {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("GET %s without the token answered 200", path)
		}
	}
}

// waitListening reads spine's standard error up to its "listening on" line
// and returns the address; it keeps reading the rest, so that spine never
// blocks on a full pipe.
func waitListening(t *testing.T, r *os.File) string {
	t.Helper()
	sc := bufio.NewScanner(r)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if _, rest, ok := strings.Cut(sc.Text(), "listening on http://"); ok {
			go func() {
				for sc.Scan() {
				}
			}()
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("spine serve exited before listening:\n%s", strings.Join(lines, "\n"))
	return ""
}

// flagValues maps each --flag=value of args to its value.
func flagValues(args []string) map[string]string {
	m := map[string]string{}
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
			m[k] = v
		}
	}
	return m
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func secretOf(s []corev1.Secret, name string) corev1.Secret {
	for _, x := range s {
		if x.Name == name {
			return x
		}
	}
	return corev1.Secret{}
}

func configOf(s []corev1.ConfigMap, name string) corev1.ConfigMap {
	for _, x := range s {
		if x.Name == name {
			return x
		}
	}
	return corev1.ConfigMap{}
}
