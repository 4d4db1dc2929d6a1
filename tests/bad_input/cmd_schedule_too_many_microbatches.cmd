schedule
--policy
1f1b
--stages
4
--microbatches
100000
