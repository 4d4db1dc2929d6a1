check
../../examples/two-stage.yaml
--steps
3
--steps
4
