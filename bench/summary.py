# The table the side-by-side scripts end with (bench/compare.sh,
# bench/handlers.sh): each label's req/s, p50 and p99 averaged over the
# rounds of bench/loadgen lines in RESULTS, then one ratio of req/s for each
# A/B argument.
# Usage: python3 bench/summary.py RESULTS A/B ...
import re, sys, collections


def ms(s):
    m = re.match(r"([0-9.]+)(ns|µs|us|ms|s)$", s)
    return float(m.group(1)) * {"ns": 1e-6, "µs": 1e-3, "us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]


runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    runs[f[0]].append((float(f[1]), ms(f[4]), ms(f[6])))
avg = {k: [sum(x[i] for x in v) / len(v) for i in range(3)] for k, v in runs.items()}
print()
print("| target | req/s | p50 | p99 |")
print("| --- | --- | --- | --- |")
for k, (rate, p50, p99) in avg.items():
    print("| %s | %.0f | %.2f ms | %.2f ms |" % (k, rate, p50, p99))
print()
for pair in sys.argv[2:]:
    a, b = pair.split("/")
    print("%s / %s: %.2f" % (a, b, avg[a][0] / avg[b][0]))
