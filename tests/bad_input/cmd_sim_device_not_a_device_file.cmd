sim
../../examples/sim/equal_stages.yaml
--device
many_errors.expected
