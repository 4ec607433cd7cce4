# PyYAML in the data Guest: its pure-Python loader and dumper (no libyaml), compared
# with Debian's python3-yaml natively.
import datetime

import yaml

text = """
service: spine
replicas: 3
ports: [8080, 9090]
limits:
  memory: 2Gi
  cpu: 1.5
started: 2026-12-07
tags:
  - fast
  - safe
anchors:
  base: &base {timeout: 30, retries: 2}
  job: {<<: *base, retries: 5}
"""
doc = yaml.safe_load(text)
print(sorted(doc))
print(doc["replicas"] * 2, doc["limits"]["cpu"], type(doc["started"]).__name__)
print(doc["anchors"]["job"])
print(yaml.safe_dump(doc, sort_keys=True), end="")
print(yaml.dump({"when": datetime.date(2026, 12, 7), "n": [1, 2.5, None, True]}, default_flow_style=True), end="")
print(list(yaml.safe_load_all("a: 1\n---\nb: 2\n")))
try:
    yaml.safe_load("!!python/object:os.system {}")
except yaml.YAMLError as exc:
    print(type(exc).__name__)
print(yaml.__version__)
