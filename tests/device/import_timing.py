"""Cold build and warm (cached) import times of a generated module, each in a fresh process.
Usage: python tests/device/import_timing.py generated/avg_pool2d/model_new.py CACHE_DIR"""

import os
import subprocess
import sys

path, cache = sys.argv[1], sys.argv[2]
env = dict(os.environ, KGEN_CACHE_DIR=cache)
code = ("import time, torch; torch.cuda.init(); t = time.time(); "
        f"exec(open({path!r}).read(), {{'__name__': 'timing'}}); print('%.3f' % (time.time() - t))")
for label in ("cold build", "warm import", "warm import"):
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if r.returncode:
        print(r.stderr[-3000:])
        sys.exit(1)
    print(f"{label}: {r.stdout.strip()} s (module exec, excluding `import torch`)")
