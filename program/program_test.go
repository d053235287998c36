package program

import (
	"encoding/json"
	"testing"
)

// A Program is stored in handles' records: its JSON names must read what
// an earlier build wrote.
func TestProgramReadsStoredRecords(t *testing.T) {
	stored := `{"code":"async () =\u003e 1","modules":{"./a.js":"export default 2"},"origin":{"file":"body","line":2},"language":"typescript"}`
	var p Program
	if err := json.Unmarshal([]byte(stored), &p); err != nil {
		t.Fatal(err)
	}
	if p.Code != "async () => 1" || p.Modules["./a.js"] != "export default 2" || p.Origin == nil || *p.Origin != (Origin{File: "body", Line: 2}) || !p.TypeScript() {
		t.Fatalf("decoded %+v", p)
	}
	again, _ := json.Marshal(p)
	if string(again) != stored {
		t.Fatalf("encoded %s, stored %s", again, stored)
	}
}

func TestScheduledRequestCarriesItsTick(t *testing.T) {
	r := ScheduledRequest("*/5 * * * *", 1700000000000)
	if !IsScheduledURL(r.URL) || r.Method != "GET" || r.Body != nil || r.Headers == nil {
		t.Fatalf("tick request %+v", r)
	}
	for _, url := range []string{"", "scheduled:", "scheduled:x:* * * * *", "scheduled:12", "https://scheduled:1:x"} {
		if IsScheduledURL(url) {
			t.Errorf("%q taken for a tick", url)
		}
	}
	if (WireResponse{Headers: [][2]string{{"Retainer-No-Retry", "1"}}}).NoRetry() != true || (WireResponse{}).NoRetry() {
		t.Fatal("NoRetry misread the header")
	}
}
