check
../../examples/two-stage.yaml
--steps
10000000000000
