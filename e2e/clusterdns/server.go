package clusterdns

import (
	"fmt"
	"net"
	"sync"

	"github.com/miekg/dns"
)

// Answerer is what a Server answers from: one Zone, or a Zones set.
type Answerer interface {
	Answer(q dns.Question) (answers []dns.RR, rcode int, ok bool)
	SOA() dns.RR
}

// Server serves DNS over UDP and TCP on one address.
type Server struct {
	Addr string
	udp  *dns.Server
	tcp  *dns.Server
}

// Serve answers questions from a on addr (host:port) over UDP and TCP, until Close.
func Serve(addr string, a Answerer) (*Server, error) {
	h := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		_ = w.WriteMsg(respond(a, req))
	})
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("cluster DNS: %w", err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("cluster DNS: %w", err)
	}
	s := &Server{Addr: addr, udp: &dns.Server{PacketConn: pc, Handler: h}, tcp: &dns.Server{Listener: l, Handler: h}}
	go func() { _ = s.udp.ActivateAndServe() }()
	go func() { _ = s.tcp.ActivateAndServe() }()
	return s, nil
}

// Close stops both listeners.
func (s *Server) Close() {
	_ = s.udp.Shutdown()
	_ = s.tcp.Shutdown()
}

// respond builds the answer to one query: authoritative answers for the zone's names, REFUSED
// for anything else (there is no upstream resolver inside the harness' network namespace).
func respond(a Answerer, req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		return m.SetRcode(req, dns.RcodeNotImplemented)
	}
	m.SetReply(req)
	answers, rcode, ok := a.Answer(req.Question[0])
	if !ok {
		m.Rcode = dns.RcodeRefused
		return m
	}
	m.Authoritative = true
	m.Rcode = rcode
	m.Answer = answers
	if len(answers) == 0 {
		m.Ns = []dns.RR{a.SOA()}
	}
	return m
}

// Zones answers from several zones, the first that knows the name: the test process' resolver,
// which serves every cluster the process runs (one at a time, in practice).
type Zones struct {
	mu    sync.Mutex
	zones []*Zone
}

// Add makes z answer too, after the zones added before it.
func (zs *Zones) Add(z *Zone) {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	zs.zones = append(zs.zones, z)
}

// Remove stops z answering.
func (zs *Zones) Remove(z *Zone) {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	for i, x := range zs.zones {
		if x == z {
			zs.zones = append(zs.zones[:i], zs.zones[i+1:]...)
			return
		}
	}
}

// Answer is the first zone's answer that names something (or its refusal, with no zone).
func (zs *Zones) Answer(q dns.Question) ([]dns.RR, int, bool) {
	zs.mu.Lock()
	zones := append([]*Zone(nil), zs.zones...)
	zs.mu.Unlock()
	var first struct {
		answers []dns.RR
		rcode   int
		ok      bool
	}
	for i, z := range zones {
		answers, rcode, ok := z.Answer(q)
		if ok && rcode == dns.RcodeSuccess {
			return answers, rcode, ok
		}
		if i == 0 || (ok && !first.ok) {
			first.answers, first.rcode, first.ok = answers, rcode, ok
		}
	}
	return first.answers, first.rcode, first.ok
}

// SOA is the first zone's (all zones of a process share the cluster domain).
func (zs *Zones) SOA() dns.RR {
	zs.mu.Lock()
	defer zs.mu.Unlock()
	if len(zs.zones) == 0 {
		return (&Zone{domain: "cluster.local."}).SOA()
	}
	return zs.zones[0].SOA()
}
