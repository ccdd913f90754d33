package harness

import (
	"context"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kaas/e2e/svcproxy"
)

// The ingress controller (see README.md, "Ingress with TLS passthrough"): the service proxy
// serves the Ingresses of Options.IngressClasses that ask for TLS passthrough
// (svcproxy/ingress.go), as ingress-nginx started with --enable-ssl-passthrough does. It is
// installed as ingress-nginx's manifests install it, so kubectl shows what a user would see: an
// IngressClass per class with ingress-nginx's controller name, and the controller's
// LoadBalancer Service ingress-nginx/ingress-nginx-controller, which takes its address from the
// load-balancer pool like any other (so the two never collide) and whose endpoint is the
// controller's own address, 10.<100+k>.0.4:443, as a controller pod's would be. Served Ingresses
// get the Service's address in their status (ingress-nginx's --publish-service).

const (
	// IngressNamespace and IngressService name the ingress controller's LoadBalancer Service.
	IngressNamespace = "ingress-nginx"
	IngressService   = "ingress-nginx-controller"
	// IngressController is spec.controller of the harness' IngressClasses: ingress-nginx's.
	IngressController = "k8s.io/ingress-nginx"
	// DefaultIngressClass is the class served when Options.IngressClasses is nil.
	DefaultIngressClass = "nginx"
	// ingressManager marks the EndpointSlice the harness writes for the controller's Service,
	// which has no selector (the EndpointSlice controller leaves such slices alone).
	ingressManager = "kaas-e2e-harness"
)

// ingressOptions are the service proxy's ingress controller options for classes (none: no
// controller), listening on the controller's own address.
func (c *Env) ingressOptions(classes []string) (svcproxy.IngressOptions, error) {
	if len(classes) == 0 {
		return svcproxy.IngressOptions{}, nil
	}
	host := c.subnet + ".0.4"
	if err := addLoopbackAddr(host); err != nil {
		return svcproxy.IngressOptions{}, err
	}
	return svcproxy.IngressOptions{Classes: classes, Listen: net.JoinHostPort(host, "443"),
		PublishService: IngressNamespace + "/" + IngressService}, nil
}

// installIngress creates what ingress-nginx's install would for the controller at listen: the
// IngressClasses, and the LoadBalancer Service in front of the controller with its endpoint;
// then waits for the Service's address (IngressIP).
func (c *Env) installIngress(ctx context.Context, ingress svcproxy.IngressOptions) error {
	if len(ingress.Classes) == 0 {
		return nil
	}
	labels := map[string]string{"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"}
	for _, class := range ingress.Classes {
		ic := &networkingv1.IngressClass{ObjectMeta: metav1.ObjectMeta{Name: class, Labels: labels},
			Spec: networkingv1.IngressClassSpec{Controller: IngressController}}
		if err := create(c.Client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{})); err != nil {
			return fmt.Errorf("IngressClass %s: %w", class, err)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: IngressNamespace}}
	if err := create(c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})); err != nil {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: IngressNamespace, Name: IngressService, Labels: labels},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{
			{Name: "https", Port: 443, TargetPort: intstr.FromInt32(443), Protocol: corev1.ProtocolTCP}}},
	}
	if err := create(c.Client.CoreV1().Services(IngressNamespace).Create(ctx, svc, metav1.CreateOptions{})); err != nil {
		return err
	}
	if err := create(c.Client.DiscoveryV1().EndpointSlices(IngressNamespace).Create(ctx, ingressSlice(ingress.Listen),
		metav1.CreateOptions{})); err != nil {
		return err
	}
	return c.WaitFor(30*time.Second, func() (bool, error) {
		svc, err := c.Client.CoreV1().Services(IngressNamespace).Get(ctx, IngressService, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if ing := svc.Status.LoadBalancer.Ingress; len(ing) > 0 && ing[0].IP != "" {
			c.ingressIP = ing[0].IP
			return true, nil
		}
		return false, fmt.Errorf("%s/%s: no load-balancer address yet", IngressNamespace, IngressService)
	})
}

// ingressSlice is the controller Service's EndpointSlice: one ready endpoint, the controller's
// own address.
func ingressSlice(listen string) *discoveryv1.EndpointSlice {
	host, _, _ := net.SplitHostPort(listen)
	ready, name, port, tcp := true, "https", int32(443), corev1.ProtocolTCP
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: IngressNamespace, Name: IngressService,
			Labels: map[string]string{discoveryv1.LabelServiceName: IngressService, discoveryv1.LabelManagedBy: ingressManager}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{host}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &tcp}},
	}
}

// create is the error of a Create call, nil when the object exists already.
func create[T any](_ T, err error) error {
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// IngressIP is the ingress controller's address: its LoadBalancer Service's
// (ingress-nginx/ingress-nginx-controller), from the load-balancer pool, where it serves TLS
// passthrough on port 443 to the laptop too, and what served Ingresses show in
// status.loadBalancer.ingress. "" without an ingress controller (Options.IngressClasses empty,
// or outside the network namespace).
func (c *Env) IngressIP() string { return c.ingressIP }
