schedule
--policy
1f1b
--stages
100000
--microbatches
8
