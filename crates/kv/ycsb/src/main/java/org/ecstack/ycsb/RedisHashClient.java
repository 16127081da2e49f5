package org.ecstack.ycsb;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.Vector;

import redis.clients.jedis.Jedis;
import site.ycsb.ByteIterator;
import site.ycsb.DB;
import site.ycsb.DBException;
import site.ycsb.Status;
import site.ycsb.StringByteIterator;

/**
 * A minimal YCSB binding for servers that speak the Redis protocol, written for ecstack because
 * the published {@code site.ycsb:redis-binding} jar is not on Maven Central. It sends the commands
 * YCSB's Redis binding sends, so ecstack kv and redis-server see the same traffic:
 *
 * <ul>
 *   <li>a record is one hash: insert and update are {@code HMSET key field value ...};</li>
 *   <li>read is {@code HGETALL key}, or {@code HMGET key field ...} when YCSB asks for fields;</li>
 *   <li>every inserted key is also a member of the sorted set {@code _indices}, scored by the
 *       key's Java {@code hashCode()} ({@code ZADD}); scan is {@code ZRANGEBYSCORE _indices
 *       score +inf LIMIT 0 n} followed by one read per key; delete is {@code DEL} + {@code ZREM}.</li>
 * </ul>
 *
 * Properties: {@code redis.host}, {@code redis.port}, {@code redis.password} (sent with AUTH),
 * {@code redis.timeout} (ms). One connection per YCSB client thread.
 */
public class RedisHashClient extends DB {
  static final String INDEX_KEY = "_indices";

  private Jedis jedis;

  @Override
  public void init() throws DBException {
    Properties p = getProperties();
    String host = p.getProperty("redis.host", "127.0.0.1");
    int port = Integer.parseInt(p.getProperty("redis.port", "6379"));
    int timeoutMs = Integer.parseInt(p.getProperty("redis.timeout", "10000"));
    try {
      jedis = new Jedis(host, port, timeoutMs);
      jedis.connect();
      String password = p.getProperty("redis.password");
      if (password != null && !password.isEmpty()) {
        jedis.auth(password);
      }
    } catch (RuntimeException e) {
      throw new DBException("connecting to " + host + ":" + port + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void cleanup() throws DBException {
    if (jedis != null) {
      jedis.close();
    }
  }

  private static double indexScore(String key) {
    return key.hashCode();
  }

  @Override
  public Status read(String table, String key, Set<String> fields,
      Map<String, ByteIterator> result) {
    try {
      if (fields == null) {
        StringByteIterator.putAllAsByteIterators(result, jedis.hgetAll(key));
      } else {
        List<String> names = new ArrayList<>(fields);
        List<String> values = jedis.hmget(key, names.toArray(new String[0]));
        for (int i = 0; i < names.size() && i < values.size(); i++) {
          if (values.get(i) != null) {
            result.put(names.get(i), new StringByteIterator(values.get(i)));
          }
        }
      }
      return result.isEmpty() ? Status.NOT_FOUND : Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status insert(String table, String key, Map<String, ByteIterator> values) {
    try {
      if (!"OK".equals(jedis.hmset(key, StringByteIterator.getStringMap(values)))) {
        return Status.ERROR;
      }
      jedis.zadd(INDEX_KEY, indexScore(key), key);
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status update(String table, String key, Map<String, ByteIterator> values) {
    try {
      return "OK".equals(jedis.hmset(key, StringByteIterator.getStringMap(values)))
          ? Status.OK : Status.ERROR;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status delete(String table, String key) {
    try {
      long deleted = jedis.del(key);
      long unindexed = jedis.zrem(INDEX_KEY, key);
      return deleted == 0 && unindexed == 0 ? Status.NOT_FOUND : Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }

  @Override
  public Status scan(String table, String startkey, int recordcount, Set<String> fields,
      Vector<HashMap<String, ByteIterator>> result) {
    try {
      Set<String> keys = jedis.zrangeByScore(INDEX_KEY, indexScore(startkey),
          Double.POSITIVE_INFINITY, 0, recordcount);
      for (String key : keys) {
        HashMap<String, ByteIterator> values = new HashMap<>();
        read(table, key, fields, values);
        result.add(values);
      }
      return Status.OK;
    } catch (RuntimeException e) {
      return Status.ERROR;
    }
  }
}
