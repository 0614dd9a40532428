# The data-analyst example (Python): summary statistics of the Palmer penguins data in data.csv,
# and a scatter chart saved as output.png (1000 x 600 px).
#   sandbox run -p python-analysis --file data.csv=examples/data-analyst/data/penguins.csv \
#     --out-dir out examples/data-analyst/analysis.py
import matplotlib.pyplot as plt
import pandas as pd

df = pd.read_csv("data.csv")
numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
print(f"rows: {len(df)}, complete rows: {len(df.dropna(subset=numeric))}")

by_species = df.groupby("species")[numeric].agg(["count", "mean", "std"]).round(3)
pd.set_option("display.width", 200)
pd.set_option("display.max_columns", 20)
print(by_species.to_string())

r = df["flipper_length_mm"].corr(df["body_mass_g"])
print(f"pearson r(flipper_length_mm, body_mass_g) = {r:.6f}")

fig, ax = plt.subplots(figsize=(10, 6), dpi=100)
for species, rows in df.dropna(subset=["flipper_length_mm", "body_mass_g"]).groupby("species"):
    ax.scatter(rows["flipper_length_mm"], rows["body_mass_g"], label=species, s=14, alpha=0.8)
ax.set_xlabel("flipper length (mm)")
ax.set_ylabel("body mass (g)")
ax.set_title(f"Palmer penguins: flipper length vs body mass (r = {r:.3f})")
ax.legend()
fig.savefig("output.png")
print("saved output.png")
