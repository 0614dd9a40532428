// The data-analyst example (TypeScript, function harness): parses data.csv (Palmer penguins)
// with papaparse and returns per-species figures and a correlation as returnData.
//   sandbox run -p typescript-analysis --harness function --file data.csv=examples/data-analyst/data/penguins.csv \
//     examples/data-analyst/analysis.ts
import { readFileSync } from "node:fs";
import Papa from "papaparse";
import { mean, sampleCorrelation, sampleStandardDeviation } from "simple-statistics";

type Row = Record<string, string | number | null>;
const numeric = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"] as const;

export default function main(_input: unknown) {
  const parsed = Papa.parse<Row>(readFileSync("data.csv", "utf8"), { header: true, dynamicTyping: true, skipEmptyLines: true });
  const rows = parsed.data;
  const num = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
  const species: Record<string, Record<string, { count: number; mean: number; std: number }>> = {};
  for (const name of [...new Set(rows.map((r) => String(r.species)))].sort()) {
    const of = rows.filter((r) => r.species === name);
    species[name] = {};
    for (const col of numeric) {
      const xs = of.map((r) => r[col]).filter(num);
      species[name][col] = { count: xs.length, mean: mean(xs), std: sampleStandardDeviation(xs) };
    }
  }
  const pairs = rows.filter((r) => num(r.flipper_length_mm) && num(r.body_mass_g));
  const r = sampleCorrelation(pairs.map((p) => p.flipper_length_mm as number), pairs.map((p) => p.body_mass_g as number));
  console.log(`rows: ${rows.length}, species: ${Object.keys(species).join(", ")}`);
  return { rows: rows.length, completeRows: rows.filter((r) => numeric.every((c) => num(r[c]))).length, species, flipperBodyMassR: r };
}
