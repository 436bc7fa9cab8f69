// oidc-verify: an OpenID Connect relying party independent of bc_join, built
// from Debian's packages only (golang-go, golang-github-coreos-go-oidc-dev,
// golang-gopkg-square-go-jose.v2-dev; GO111MODULE=off
// GOPATH=/usr/share/gocode), for test/gateway/oidc.t.
//
//	oidc-verify ISSUER AUDIENCE TOKEN
//
// Starts from the issuer alone, as AWS IAM or Vault do: discovery
// (ISSUER/.well-known/openid-configuration, whose issuer must equal ISSUER
// byte for byte), then the JWKS at its jwks_uri, then the token: signature
// (ES256 only), iss, aud (AUDIENCE among it) and exp.  The TLS roots are the
// system's, or SSL_CERT_FILE's.  Prints one JSON line, {"ok":true,"sub":...,
// "iss":...,"kid":...} and exits 0, or {"ok":false,"error":...} and exits 1.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	oidc "github.com/coreos/go-oidc"
	jose "gopkg.in/square/go-jose.v2"
)

func out(v map[string]interface{}, code int) {
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
	os.Exit(code)
}

func fail(stage string, err error) {
	out(map[string]interface{}{"ok": false, "stage": stage, "error": err.Error()}, 1)
}

func main() {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "usage: oidc-verify ISSUER AUDIENCE TOKEN")
		os.Exit(2)
	}
	issuer, aud, token := os.Args[1], os.Args[2], strings.TrimSpace(os.Args[3])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	provider, err := oidc.NewProvider(ctx, issuer)
	if err != nil {
		fail("discovery", err)
	}
	// go-oidc 2.1 defaults to RS256: the algorithm is named, not taken from discovery.
	verifier := provider.Verifier(&oidc.Config{ClientID: aud, SupportedSigningAlgs: []string{"ES256"}})
	t, err := verifier.Verify(ctx, token)
	if err != nil {
		fail("verify", err)
	}
	kid := ""
	if jws, err := jose.ParseSigned(token); err == nil && len(jws.Signatures) == 1 {
		kid = jws.Signatures[0].Header.KeyID
	}
	out(map[string]interface{}{"ok": true, "sub": t.Subject, "iss": t.Issuer, "aud": t.Audience, "kid": kid}, 0)
}
