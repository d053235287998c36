package receipts

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/retainer-gw/retainer/budgets"
	"github.com/retainer-gw/retainer/internal/wirejson"
)

// A receipt within budgets.ReceiptBytes: what is cut first, and how a
// cut is named in Truncated.

// fit marshals r within budgets.ReceiptBytes, whatever the run (a budget: docs/
// architecture.md, "Budgets"). Parts no receipt needs whole are capped
// first, before anything is marshalled (a 2 KB chain request once made a
// 252 MiB receipt, and each try below marshals it again); then, while the
// receipt is over the bound, it loses steps' logs, children, logs, steps'
// inputs and results, denials, the result, the prompt, modules, steps'
// code, the code, and at last the steps themselves. Each cut is named in
// Truncated. The JSON is written without HTML escaping (wirejson), so the
// bound measures what a reader of the receipt receives: escaped, a log of
// '<' would take six bytes a character and be cut six times as soon.
func fit(r *Receipt) ([]byte, error) {
	precap(r)
	data, err := wirejson.Marshal(r)
	if err != nil || len(data) <= budgets.ReceiptBytes {
		return data, err
	}
	cut := func(name string, f func()) bool {
		f()
		r.Truncated = appendOnce(r.Truncated, name)
		data, err = wirejson.Marshal(r)
		return err == nil && len(data) <= budgets.ReceiptBytes
	}
	if len(r.Steps) > 0 && cut("steps' logs", func() {
		for i := range r.Steps {
			r.Steps[i].Logs = []string{}
		}
	}) {
		return data, nil
	}
	if len(r.Children) > 0 && cut("children", func() { r.Children = nil }) {
		return data, nil
	}
	if cut("logs", func() {
		for len(r.Logs) > 0 {
			r.Logs = r.Logs[:len(r.Logs)/2]
			if d, _ := wirejson.Marshal(r); len(d) <= budgets.ReceiptBytes {
				break
			}
		}
	}) {
		return data, nil
	}
	if len(r.Steps) > 0 && cut("steps' inputs and results", func() {
		for i := range r.Steps {
			r.Steps[i].Input = cutJSON
			r.Steps[i].Outcome.Result = cutJSON
			r.Steps[i].Outcome.Denials = countOnly(r.Steps[i].Outcome.Denials)
		}
	}) {
		return data, nil
	}
	if len(r.Outcome.Denials) > 1 && cut("denials", func() { r.Outcome.Denials = countOnly(r.Outcome.Denials) }) {
		return data, nil
	}
	if cut("result", func() { r.Outcome.Result = json.RawMessage(`"[result over the receipt size bound]"`) }) {
		return data, nil
	}
	if r.Prompt != "" && cut("prompt", func() { r.Prompt = cutText(r.Prompt, budgets.ReceiptBytes/8, "prompt") }) {
		return data, nil
	}
	if cut("modules", func() { r.Modules = map[string]string{} }) {
		return data, nil
	}
	if len(r.Steps) > 0 && cut("steps' code", func() {
		for i := range r.Steps {
			r.Steps[i].Code = cutText(r.Steps[i].Code, 256, "code")
		}
	}) {
		return data, nil
	}
	if cut("code", func() { r.Code = cutText(r.Code, budgets.ReceiptBytes/2, "code") }) {
		return data, nil
	}
	// What is left over the bound is the steps themselves (their number)
	// or texts no run makes so long; the receipt keeps what the run was
	// and how it ended.
	n := len(r.Steps)
	cut(fmt.Sprintf("steps (%d)", n), func() { r.Steps = nil })
	if err == nil && len(data) > budgets.ReceiptBytes {
		cut("code, logs and error text", func() {
			r.Code, r.Logs, r.Modules = cutText(r.Code, 1024, "code"), []string{}, nil
			if r.Outcome.Error != nil {
				r.Outcome.Error.Message = cutText(r.Outcome.Error.Message, 1024, "text")
			}
			r.Prompt = cutText(r.Prompt, 1024, "prompt")
		})
	}
	return data, err
}

// AddStep appends a chain's step, cutting at once what the receipt would
// cut anyway when it is put (precap): a chain held every step's input and
// result until then (32 steps answering 8 MiB each: 256 MiB a chain).
func (r *Receipt) AddStep(s Step) {
	r.Steps = append(r.Steps, s)
	precap(r)
}

// precapPart is the most one step's input or result, a prompt, or the
// denials of a run may take before the receipt is even marshalled.
const precapPart = budgets.ReceiptBytes / 4

// precap cuts, without marshalling, what is over precapPart on its own.
func precap(r *Receipt) {
	capped := false
	for i := range r.Steps {
		st := &r.Steps[i]
		if len(st.Input) > precapPart {
			st.Input, capped = cutJSON, true
		}
		if len(st.Outcome.Result) > precapPart {
			st.Outcome.Result, capped = cutJSON, true
		}
		if len(st.Code) > precapPart {
			st.Code, capped = cutText(st.Code, precapPart, "code"), true
		}
		if len(st.Outcome.Denials) > 100 {
			st.Outcome.Denials, capped = countOnly(st.Outcome.Denials), true
		}
	}
	if capped {
		r.Truncated = appendOnce(r.Truncated, "steps' inputs and results")
	}
	if len(r.Outcome.Result) > budgets.ReceiptBytes {
		r.Outcome.Result = json.RawMessage(`"[result over the receipt size bound]"`)
		r.Truncated = appendOnce(r.Truncated, "result")
	}
	if len(r.Outcome.Denials) > 100 {
		r.Outcome.Denials = countOnly(r.Outcome.Denials)
		r.Truncated = appendOnce(r.Truncated, "denials")
	}
	if len(r.Prompt) > precapPart {
		r.Prompt = cutText(r.Prompt, precapPart, "prompt")
		r.Truncated = appendOnce(r.Truncated, "prompt")
	}
}

// cutJSON stands for a value cut from a receipt.
var cutJSON = json.RawMessage(`"[cut at the receipt size bound]"`)

// cutText keeps the first n bytes of s (on a rune boundary) and says so.
func cutText(s string, n int, what string) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + fmt.Sprintf("\n[%s cut at the receipt size bound: %d bytes in all]", what, len(s))
}

// countOnly keeps the first denial and how many there were.
func countOnly(denials []string) []string {
	if len(denials) <= 1 {
		return denials
	}
	return []string{cutText(denials[0], 1024, "denial"), fmt.Sprintf("[%d denials in all; the others cut at the receipt size bound]", len(denials))}
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}
