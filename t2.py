import socket, time
s = socket.create_connection(('198.18.0.2', 7007), timeout=5); s.sendall(b'ping'); print(s.recv(10)); s.close()
t=time.time()
s = socket.create_connection(('198.18.0.2', 7007), timeout=5); s.sendall(b'ping'); print(s.recv(10)); s.shutdown(socket.SHUT_WR); print('after shutdown', s.recv(10), time.time()-t); s.close()
time.sleep(2)
