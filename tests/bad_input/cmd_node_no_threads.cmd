node
--coordinator
127.0.0.1:1
--node
0
--threads
0
