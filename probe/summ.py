import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/steps-*.json")):
    d = json.load(open(f))
    for case, steps in d.items():
        if steps["total"][2] < 5:
            continue
        parts = " ".join(f"{k}={v[0]:.1f}" for k, v in sorted(steps.items()) if k != "total")
        print(f"{f[-16:]} {case}: total med {steps['total'][0]:.1f} min {steps['total'][1]:.1f} n={steps['total'][2]} | {parts}")
