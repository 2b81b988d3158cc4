"""Write catalog/validation/serving_bands.json: what validation measures for each serving engine
(gpuplan.serve.bands.compute). Run after a change to the serving model or its validation rows:

    python scripts/serving_bands.py
"""

import json

from gpuplan.serve.bands import PATH, compute

if __name__ == "__main__":
    doc = {
        "what": "per engine profile: published serving runs (validate serving + serving-held-out), "
        "median and p90 |error|, mean signed error of throughput and of latency rows",
        "script": "scripts/serving_bands.py",
        "engines": compute(),
    }
    PATH.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["engines"], indent=2))
