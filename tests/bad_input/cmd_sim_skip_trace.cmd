sim
../../examples/skippipe-geo20.yaml
--trace
sim_skip_trace.json
