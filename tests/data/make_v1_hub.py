import os
import sys
import json
import subprocess
import random
from pathlib import Path

sys.path.insert(0, "/work/wt-v2")
from tests.e2e.hubproc import HubProcess, forkd

MiB = 1 << 20
root = Path("/tmp/v1gen/run")
import shutil

shutil.rmtree(root, ignore_errors=True)
root.mkdir(parents=True)
rng = random.Random(9)
# base: 2 MiB memory (sparse), 1 MiB data; link: 256 KiB rewritten
src0 = root / "src0"
src0.mkdir()
with open(src0 / "memory.bin", "wb") as f:
    f.truncate(2 * MiB)
    f.seek(256 << 10)
    f.write(b"".join(rng.randbytes(256) * 256 for _ in range(16)))
(src0 / "vmstate").write_bytes(rng.randbytes(3000))
src1 = root / "src1"
src1.mkdir()
data = bytearray((src0 / "memory.bin").read_bytes())
data[512 << 10 : 768 << 10] = b"".join(rng.randbytes(256) * 256 for _ in range(4))
data[1536 << 10 : 1600 << 10] = rng.randbytes(256) * 256
with open(src1 / "memory.bin", "wb") as f:
    f.truncate(len(data))
    for off in range(0, len(data), 65536):
        if any(data[off : off + 65536]):
            f.seek(off)
            f.write(data[off : off + 65536])
(src1 / "vmstate").write_bytes(rng.randbytes(2500))
hub = HubProcess(root / "hub", root / "hub.log")
env = {**os.environ, "FORKD_HOME": str(root / "home"), "XDG_CONFIG_HOME": str(root / "cfg"), "FORKD_HUB_URL": hub.url}


def run(*a, input=None):
    r = subprocess.run(forkd(*a), env=env, capture_output=True, text=True, input=input, timeout=300)
    assert r.returncode == 0, (a, r.stdout, r.stderr)
    return r.stdout


run("login", hub.url, "--token-stdin", input=hub.token("alice", "push:acme/*") + "\n")
run("import", str(src0), "base")
run("import", str(src1), "numpy", "--parent", "base")
out = json.loads(run("push", "numpy", "acme/py:v1", "--json", "--public"))
print(out)
hub.stop()
json.dump({"head": out["digest"], "links": [l["digest"] for l in out["links"]]}, open(root / "expected.json", "w"))
