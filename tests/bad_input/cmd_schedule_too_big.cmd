schedule
--policy
gpipe
--stages
4096
--microbatches
65536
