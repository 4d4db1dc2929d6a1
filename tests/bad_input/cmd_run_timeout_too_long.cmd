run
../../examples/two-stage.yaml
--timeout
9223372036854775807
