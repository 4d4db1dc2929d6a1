run
../../examples/two-stage.yaml
--trace-buffer
100000000000
