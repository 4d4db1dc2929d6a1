sync
--values
1048576
--replicas
4096
