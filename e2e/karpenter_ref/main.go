// karpenter-ref: a reference built from Karpenter's own Go modules (sigs.k8s.io/karpenter and
// github.com/aws/karpenter-provider-aws, versions pinned by build.sh), so karpy's tests can compare
// against what Karpenter itself computes. Nothing here reimplements Karpenter: every answer comes from
// its packages; this file only reads stdin and prints.
//
// Subcommands:
//
//	crds [--source aws|core|all]   the CRD YAML the modules' pkg/apis packages embed (//go:embed),
//	                               as a multi-document YAML stream
//	hash [--ca-bundle B] [--no-defaults]
//	                               NodePool / EC2NodeClass manifests (YAML or JSON, many documents) on
//	                               stdin; per object one JSON line {kind, name, hash, annotations, object}
//	userdata [flags]               one EC2NodeClass + one NodeClaim on stdin; prints {amiFamily, userData,
//	                               blockDeviceMappings (the EC2NodeClass's, else the family's defaults)}
//
// Objects read from stdin are first pruned and defaulted with the embedded CRD schemas, as the API server
// does before Karpenter ever sees them (--no-defaults hashes the object exactly as given).
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	structuraldefaulting "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/defaulting"
	structuralpruning "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	awsapis "github.com/aws/karpenter-provider-aws/pkg/apis"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	awsoptions "github.com/aws/karpenter-provider-aws/pkg/operator/options"
	"github.com/aws/karpenter-provider-aws/pkg/providers/amifamily"
	coreapis "sigs.k8s.io/karpenter/pkg/apis"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	coreoptions "sigs.k8s.io/karpenter/pkg/operator/options"
)

func main() {
	if len(os.Args) < 2 {
		fail(errors.New("usage: karpenter-ref crds|hash|userdata|settings [flags]"))
	}
	var err error
	switch os.Args[1] {
	case "crds":
		err = runCRDs(os.Args[2:])
	case "hash":
		err = runHash(os.Args[2:])
	case "userdata":
		err = runUserData(os.Args[2:])
	case "settings":
		err = runSettings()
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "karpenter-ref:", err)
	os.Exit(2)
}

// embeddedCRDs returns the CRD YAML documents: the AWS provider's (what an AWS install applies: its own
// copies of NodePool/NodeClaim/NodeOverlay plus EC2NodeClass), then core's that the provider does not ship.
func embeddedCRDs(source string) ([][]byte, error) {
	aws := [][]byte{awsapis.EC2NodeClassCRD, awsapis.NodePoolCRD, awsapis.NodeClaimCRD, awsapis.NodeOverlayCRD}
	core := [][]byte{coreapis.NodePoolCRD, coreapis.NodeClaimCRD, coreapis.NodeOverlayCRD, coreapis.CapacityBufferCRD}
	switch source {
	case "aws":
		return aws, nil
	case "core":
		return core, nil
	case "all":
		seen := map[string]bool{}
		out := [][]byte{}
		for _, doc := range append(append([][]byte{}, aws...), core...) {
			name, err := crdName(doc)
			if err != nil {
				return nil, err
			}
			if !seen[name] {
				seen[name] = true
				out = append(out, doc)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("--source must be aws, core or all, not %q", source)
}

func crdName(doc []byte) (string, error) {
	crd := apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(doc, &crd); err != nil {
		return "", err
	}
	return crd.Name, nil
}

func runCRDs(args []string) error {
	fs := flag.NewFlagSet("crds", flag.ExitOnError)
	source := fs.String("source", "all", "aws (the provider's embedded CRDs), core, or all (aws, then core's others)")
	_ = fs.Parse(args)
	docs, err := embeddedCRDs(*source)
	if err != nil {
		return err
	}
	for _, doc := range docs {
		fmt.Print("---\n")
		fmt.Print(string(bytes.TrimPrefix(doc, []byte("---\n"))))
	}
	return nil
}

// schemas maps a kind to the structural schema of its served v1 version, from the embedded CRDs.
func schemas() (map[string]*structuralschema.Structural, error) {
	docs, err := embeddedCRDs("all")
	if err != nil {
		return nil, err
	}
	out := map[string]*structuralschema.Structural{}
	for _, doc := range docs {
		crd := apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(doc, &crd); err != nil {
			return nil, err
		}
		for _, v := range crd.Spec.Versions {
			if !v.Storage || v.Schema == nil {
				continue
			}
			internal := &apiextensions.JSONSchemaProps{}
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, internal, nil); err != nil {
				return nil, err
			}
			s, err := structuralschema.NewStructural(internal)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", crd.Name, err)
			}
			out[crd.Spec.Names.Kind] = s
		}
	}
	return out, nil
}

// readObjects decodes every YAML/JSON document on r; with defaults, each is pruned and defaulted with
// its kind's CRD schema the way the API server stores it.
func readObjects(r io.Reader, defaults bool) ([]map[string]any, error) {
	var ss map[string]*structuralschema.Structural
	if defaults {
		var err error
		if ss, err = schemas(); err != nil {
			return nil, err
		}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []map[string]any
	for {
		obj := map[string]any{}
		if err := dec.Decode(&obj); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(obj) == 0 {
			continue
		}
		kind, _ := obj["kind"].(string)
		if s, ok := ss[kind]; ok {
			structuralpruning.Prune(obj, s, true)
			structuraldefaulting.Default(obj, s)
		}
		out = append(out, obj)
	}
}

// convert decodes obj into a Karpenter Go type through JSON, as a client reading it from the API server does
// (the types' own UnmarshalJSON methods, e.g. NillableDuration's, apply).
func convert(obj map[string]any, into any) error {
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, into)
}

func objectName(obj map[string]any) string {
	meta, _ := obj["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	return name
}

type hashResult struct {
	Kind        string            `json:"kind"`
	Name        string            `json:"name"`
	Hash        string            `json:"hash"`
	Annotations map[string]string `json:"annotations"`
	Object      map[string]any    `json:"object"`
}

func runHash(args []string) error {
	fs := flag.NewFlagSet("hash", flag.ExitOnError)
	caBundle := fs.String("ca-bundle", "", "the cluster CA bundle the EC2NodeClass hash includes (Karpenter's --cluster-ca-bundle / discovered value); empty = none")
	noDefaults := fs.Bool("no-defaults", false, "hash the objects as given, without CRD pruning and defaulting")
	_ = fs.Parse(args)
	objs, err := readObjects(os.Stdin, !*noDefaults)
	if err != nil {
		return err
	}
	var ca *string
	if *caBundle != "" {
		ca = caBundle
	}
	enc := json.NewEncoder(os.Stdout)
	for _, obj := range objs {
		res := hashResult{Name: objectName(obj), Object: obj}
		res.Kind, _ = obj["kind"].(string)
		switch res.Kind {
		case "NodePool":
			np := &karpv1.NodePool{}
			if err := convert(obj, np); err != nil {
				return fmt.Errorf("NodePool %s: %w", res.Name, err)
			}
			res.Hash = np.Hash()
			// What Karpenter core's pkg/controllers/nodepool/hash controller writes on the NodePool.
			res.Annotations = map[string]string{
				karpv1.NodePoolHashAnnotationKey:        res.Hash,
				karpv1.NodePoolHashVersionAnnotationKey: karpv1.NodePoolHashVersion,
			}
		case "EC2NodeClass":
			nc := &awsv1.EC2NodeClass{}
			if err := convert(obj, nc); err != nil {
				return fmt.Errorf("EC2NodeClass %s: %w", res.Name, err)
			}
			res.Hash = nc.Hash(ca)
			// What the AWS provider's pkg/controllers/nodeclass/hash controller writes on the EC2NodeClass.
			res.Annotations = map[string]string{
				awsv1.AnnotationEC2NodeClassHash:        res.Hash,
				awsv1.AnnotationEC2NodeClassHashVersion: awsv1.EC2NodeClassHashVersion,
			}
		default:
			return fmt.Errorf("hash: kind %q is neither NodePool nor EC2NodeClass", res.Kind)
		}
		if err := enc.Encode(res); err != nil {
			return err
		}
	}
	return nil
}

// runUserData renders user data through the AMI family's UserData bootstrapper, with the arguments the
// provider's amifamily.DefaultResolver.resolveLaunchTemplates passes it (pkg/providers/amifamily/resolver.go):
// NodeClaim taints + startup taints + the unregistered taint, labels filtered by RejectForbiddenLabels,
// maxPods filled in when the kubelet config does not set it, clusterDNS defaulted from the kube-dns IP.
func runUserData(args []string) error {
	fs := flag.NewFlagSet("userdata", flag.ExitOnError)
	clusterName := fs.String("cluster-name", "karpy", "cluster name")
	endpoint := fs.String("cluster-endpoint", "https://127.0.0.1:6443", "cluster endpoint")
	caBundle := fs.String("ca-bundle", "", "cluster CA bundle (base64)")
	cidr := fs.String("cluster-cidr", "", "service CIDR (AL2023 nodeadm)")
	kubeDNS := fs.String("kube-dns-ip", "", "kube-dns service IP (defaults clusterDNS)")
	maxPods := fs.Int("max-pods", 110, "maxPods Karpenter computed for the instance type")
	_ = fs.Parse(args)
	objs, err := readObjects(os.Stdin, true)
	if err != nil {
		return err
	}
	nodeClass, nodeClaim := &awsv1.EC2NodeClass{}, &karpv1.NodeClaim{}
	var haveClass, haveClaim bool
	for _, obj := range objs {
		switch obj["kind"] {
		case "EC2NodeClass":
			haveClass = true
			err = convert(obj, nodeClass)
		case "NodeClaim":
			haveClaim = true
			err = convert(obj, nodeClaim)
		}
		if err != nil {
			return err
		}
	}
	if !haveClass || !haveClaim {
		return errors.New("userdata: stdin needs one EC2NodeClass and one NodeClaim")
	}
	opts := &amifamily.Options{
		ClusterName:         *clusterName,
		ClusterEndpoint:     *endpoint,
		InstanceStorePolicy: nodeClass.Spec.InstanceStorePolicy,
		AMISelectorTerms:    nodeClass.Spec.AMISelectorTerms,
		AMIs:                nodeClass.Status.AMIs,
		Labels:              nodeClaim.Labels,
		NodeClassName:       nodeClass.Name,
	}
	if *caBundle != "" {
		opts.CABundle = caBundle
	}
	if *cidr != "" {
		opts.ClusterCIDR = cidr
	}
	if *kubeDNS != "" {
		opts.KubeDNSIP = net.ParseIP(*kubeDNS)
	}
	parsed, err := awsv1.ParseKubeletConfig(nodeClass.Spec.Kubelet)
	if err != nil {
		return err
	}
	if parsed == nil {
		parsed = &awsv1.ParsedKubeletConfig{}
	}
	raw := nodeClass.Spec.Kubelet.DeepCopy()
	if _, ok := parsed.MaxPodsValue(); !ok {
		mp := int32(*maxPods) //nolint:gosec
		v := intstr.FromInt32(mp)
		parsed.MaxPods = &v
		if raw == nil {
			raw = awsv1.KubeletConfiguration{}
		}
		raw["maxPods"] = awsv1.JSONValue(*maxPods)
	}
	if opts.KubeDNSIP != nil && len(parsed.ClusterDNS) == 0 {
		parsed.ClusterDNS = []string{opts.KubeDNSIP.String()}
		if raw == nil {
			raw = awsv1.KubeletConfiguration{}
		}
		raw["clusterDNS"] = awsv1.JSONValue(parsed.ClusterDNS)
	}
	taints := append(append(nodeClaim.Spec.Taints[:0:0], nodeClaim.Spec.Taints...), nodeClaim.Spec.StartupTaints...)
	found := false
	for i := range taints {
		if taints[i].MatchTaint(&karpv1.UnregisteredNoExecuteTaint) {
			found = true
		}
	}
	if !found {
		taints = append(taints, karpv1.UnregisteredNoExecuteTaint)
	}
	family := nodeClass.AMIFamily()
	amiFamily := amifamily.GetAMIFamily(family, opts)
	// The resolver keeps the EC2NodeClass's block device mappings and falls back to the family's defaults.
	mappings := nodeClass.Spec.BlockDeviceMappings
	if len(mappings) == 0 {
		mappings = amiFamily.DefaultBlockDeviceMappings()
	}
	if mappings == nil {
		mappings = []*awsv1.BlockDeviceMapping{}
	}
	bootstrapper := amiFamily.UserData(
		parsed, raw, taints, amifamily.RejectForbiddenLabels(opts.Labels), opts.CABundle, nil,
		nodeClass.Spec.UserData, opts.InstanceStorePolicy,
	)
	script, err := bootstrapper.Script(context.Background())
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"amiFamily": family, "userData": script, "blockDeviceMappings": mappings,
	})
}

// settingsFlags registers the options of source ("core": sigs.k8s.io/karpenter, "aws": the AWS provider) on a
// fresh FlagSet, reading the environment as Karpenter's AddFlags does; it returns the FlagSet and the options.
func settingsFlags(source string) (*coreoptions.FlagSet, any) {
	fs := &coreoptions.FlagSet{FlagSet: flag.NewFlagSet("karpenter", flag.ContinueOnError)}
	if source == "core" {
		o := &coreoptions.Options{}
		o.AddFlags(fs)
		return fs, o
	}
	o := &awsoptions.Options{}
	o.AddFlags(fs)
	return fs, o
}

// envName is the environment variable of a flag: upper case, dashes to underscores (runSettings verifies it).
func envName(flagName string) string {
	return strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagValue is the value a flag was registered with: its DefValue, or for BoolVarWithEnv flags (a BoolFunc, whose
// DefValue is empty) the options field the flag sets, found by name.
func flagValue(opts any, f *flag.Flag) (string, string, error) {
	typ := strings.TrimPrefix(fmt.Sprintf("%T", f.Value), "*")
	if typ != "flag.boolFuncValue" {
		return f.DefValue, typ, nil
	}
	v := reflect.ValueOf(opts).Elem()
	want := strings.ReplaceAll(f.Name, "-", "")
	for i := 0; i < v.NumField(); i++ {
		if strings.EqualFold(v.Type().Field(i).Name, want) && v.Field(i).Kind() == reflect.Bool {
			return strconv.FormatBool(v.Field(i).Bool()), "bool", nil
		}
	}
	return "", typ, fmt.Errorf("flag %s: no bool options field named like it", f.Name)
}

var settingProbes = map[string]string{
	"flag.intValue": "4242", "flag.int64Value": "4242", "flag.durationValue": "7m0s",
	"flag.float64Value": "0.25", "flag.stringValue": "probe-value",
}

// runSettings prints, one JSON object per line sorted by name, every setting Karpenter's core and AWS options
// register: env, flag, source, type and default (as registered with none of the variables set). The env name is
// verified: with the variable set to a probe value, registering again must pick the probe up.
func runSettings() error {
	type setting struct {
		Env      string `json:"env"`
		Flag     string `json:"flag"`
		Source   string `json:"source"`
		Type     string `json:"type"`
		Default  string `json:"default"`
		Verified bool   `json:"env_verified"`
	}
	var out []setting
	for _, source := range []string{"core", "aws"} {
		fs, _ := settingsFlags(source)
		fs.VisitAll(func(f *flag.Flag) { _ = os.Unsetenv(envName(f.Name)) })
		fs, opts := settingsFlags(source)
		var err error
		fs.VisitAll(func(f *flag.Flag) {
			if err != nil {
				return
			}
			def, typ, e := flagValue(opts, f)
			if e != nil {
				err = e
				return
			}
			probe, ok := settingProbes[typ]
			if typ == "bool" {
				probe, ok = strconv.FormatBool(def != "true"), true
			}
			verified := false
			if ok {
				_ = os.Setenv(envName(f.Name), probe)
				again, againOpts := settingsFlags(source)
				got, _, e := flagValue(againOpts, again.Lookup(f.Name))
				verified = e == nil && got == probe
				_ = os.Unsetenv(envName(f.Name))
			}
			out = append(out, setting{envName(f.Name), f.Name, source, typ, def, verified})
		})
		if err != nil {
			return err
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Env < out[j].Env })
	enc := json.NewEncoder(os.Stdout)
	for _, s := range out {
		if err := enc.Encode(s); err != nil {
			return err
		}
	}
	return nil
}
