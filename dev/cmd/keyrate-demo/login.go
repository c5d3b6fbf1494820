package main

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"time"
)

// demoPassword is the one password /api/login accepts. It guards nothing:
// it is printed in the start-up hints and the README, so that a login that
// succeeds, and is given back, is one command away.
const demoPassword = "keyrate"

// maxLoginBody bounds what /api/login reads of a request: a password form
// is a few dozen bytes.
const maxLoginBody = 4 << 10

// countsNot is /api/login's refund rule (httplimit.WithRefund): an answer
// below 400, a login that succeeded, gives its attempt back, so that only
// failed attempts count, bad requests among them.
func countsNot(status int) bool { return status < http.StatusBadRequest }

// serveLogin checks the password of a form (password=...) or of a JSON
// object ({"password": "..."}): 200 when it is demoPassword, 401 when it is
// another, 400 for a body it cannot read.
func serveLogin(w http.ResponseWriter, r *http.Request) {
	password, err := readPassword(w, r)
	switch {
	case err != nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_ = json.NewEncoder(w).Encode(map[string]any{"login": "failed", "error": err.Error()})
	case subtle.ConstantTimeCompare([]byte(password), []byte(demoPassword)) != 1:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_ = json.NewEncoder(w).Encode(map[string]any{"login": "failed", "error": "wrong password"})
	default:
		writeJSON(w, map[string]any{"login": "ok", "time": time.Now().UTC().Format(time.RFC3339)})
	}
}

// readPassword reads the password of r's body: a JSON object when the
// Content-Type says application/json, a form otherwise.
func readPassword(w http.ResponseWriter, r *http.Request) (string, error) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mediaType == "application/json" {
		var body struct {
			Password *string `json:"password"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			return "", errors.New(`the body is not a JSON object such as {"password": "..."}`)
		}
		if body.Password == nil {
			return "", errors.New(`no "password" in the JSON body`)
		}
		return *body.Password, nil
	}
	if err := r.ParseForm(); err != nil {
		return "", errors.New("the body is not a form such as password=...")
	}
	if !r.PostForm.Has("password") {
		return "", errors.New("no password field in the form")
	}
	return r.PostForm.Get("password"), nil
}
