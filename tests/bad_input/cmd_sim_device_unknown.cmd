sim
../../examples/sim/equal_stages.yaml
--device
nope
