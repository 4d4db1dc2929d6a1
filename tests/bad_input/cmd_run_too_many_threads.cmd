run
../../examples/two-stage.yaml
--threads
100000
